"""Exchange round trip of the node against raw pyzmq DEALER/ROUTER ping-pong, and node RSS.

Both measurements have the same shape, so their ratio means the same on any machine: a client
in this process sends one frame, waits for the answer, and sends the next, to a server in
another process, over loopback TCP.

1. raw: a pyzmq asyncio ROUTER that echoes each frame (a child process), against an asyncio
   DEALER here; payload the size of an exchange request.
2. node: a real ``gossip node`` process (started with the CLI, bootstrapped by this script
   acting as the coordinator) serves; the client here is node 1 of the same ``line:2`` cluster
   (an :class:`~gossip.exchange.exchanger.Exchanger` on a
   :class:`~node.transport.zeromq.ZmqTransport`), and each round trip is one whole exchange: build
   and encode the request, the server's decode, mixing, flow, ledger update and reply, and our
   decode and ledger update.

Then it reads the served node's resident memory (RSS) with psutil, after the exchanges.

The two kinds of round trip run in alternate blocks of 250, so that load from elsewhere on the
machine weighs on both alike.

Run: ``python benchmarks/bench_exchange.py [--rounds 3000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from typing import Any

import numpy as np
import psutil
import zmq
import zmq.asyncio

from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.vocabulary import Link, TimeBase
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.wire.schema import Bootstrap, Neighbor, Register, Request, decode, encode
from continuized.node.transport.zeromq import ZmqTransport

_ECHO = """
import asyncio, sys, zmq, zmq.asyncio
async def main():
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    print(port, flush=True)
    while True:
        await sock.send_multipart(await sock.recv_multipart())
asyncio.run(main())
"""


def percentiles(samples: list[float]) -> dict[str, float]:
    """Return p50 and p99 of ``samples`` (seconds) in microseconds."""
    p50, p99 = np.percentile(np.array(samples) * 1e6, [50, 99])
    return {"p50_us": float(p50), "p99_us": float(p99)}


class RawEcho:
    """A pyzmq asyncio ROUTER echo server in a child process, and a DEALER to it.

    The DEALER lives only during a block: an idle zmq.asyncio socket left in the event loop
    slows down everything else in it (the node's client) by a third.
    """

    async def start(self, size: int) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _ECHO, stdout=asyncio.subprocess.PIPE
        )
        assert self.proc.stdout is not None
        self.port = int((await self.proc.stdout.readline()).decode())
        self.payload = b"x" * size

    async def block(self, rounds: int, warm_up: int = 50) -> list[float]:
        """Run ``rounds`` sequential round trips; return their durations in seconds."""
        ctx = zmq.asyncio.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(f"tcp://127.0.0.1:{self.port}")
        samples = []
        try:
            for i in range(warm_up + rounds):
                start = time.perf_counter()
                await dealer.send(self.payload)
                await dealer.recv()
                if i >= warm_up:  # connection set-up, first allocations
                    samples.append(time.perf_counter() - start)
        finally:
            dealer.close()
            ctx.term()
        return samples

    async def stop(self) -> None:
        self.proc.kill()
        await self.proc.wait()


async def node_round_trips(rounds: int) -> tuple[dict[str, float], dict[str, float], float, int]:
    """Sequential exchanges against a real ``gossip node``, and raw round trips, in alternate
    blocks; return (node times, raw times, node RSS in MB, request size in bytes)."""
    topo = parse_topology("line:2")
    q = graph_quantities(topo)
    params = gossip_params("arg", q.mu_gossip, q.r_max)
    rate = 1.0  # the served node's own clock ticks about twice a second: no interference
    ctx = zmq.asyncio.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    client = ZmqTransport("tcp://127.0.0.1:0")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "continuized.cli.app", "node", "--coordinator",
        f"tcp://127.0.0.1:{port}", "--host", "127.0.0.1", "--name", "bench-server",
        "--value", "1.0", "--log-level", "warning",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        route, frame = await router.recv_multipart()
        reg = decode(frame)
        assert isinstance(reg, Register)
        epoch = time.time() + 0.5  # in the future: a fresh cluster, nothing to recover
        boots = [
            Bootstrap(
                node_id=v, cluster="bench", algorithm="arg", eta=params.eta, c=params.c,
                theta=params.theta, epoch=epoch, rate=rate,
                neighbors=(Neighbor(1 - v, addr, 0, 1.0),), initial_value=(float(v),),
                broker="", metrics_period=1.0, dim=1,
            )
            for v, addr in ((0, client.address), (1, reg.address))
        ]  # fmt: skip
        await router.send_multipart([route, encode(boots[0])])
        me = boots[1]
        await client.connect({0: reg.address})
        ex = Exchanger(
            1,
            [Link(0, 0, 1.0)],
            Ledger(me.initial_value, [0], eta=me.eta),
            me.c,
            TimeBase(epoch, rate),
            timeout=5.0,
            max_timeout=5.0,
        )
        await asyncio.sleep(epoch - time.time())

        async def exchanges(count: int) -> list[float]:
            samples = []
            for _ in range(count):
                start = time.perf_counter()
                out = ex.initiate(0, time.time())
                assert out is not None
                client.send(out.peer, out.frame)
                while ex.pending or ex.waiting:  # a Busy (the peer's own tick): try again
                    if not ex.pending:
                        for again in ex.expire(time.time()):
                            client.send(again.peer, again.frame)
                        await asyncio.sleep(0)
                        continue
                    incoming = await client.recv()
                    answer = ex.receive(incoming.data, time.time())
                    if answer is not None and incoming.route is not None:
                        client.answer(incoming.route, answer)  # the server's own rare ticks
                samples.append(time.perf_counter() - start)
            return samples

        await exchanges(200)  # warm-up
        size = len(encode(Request(src=1, edge=0, seq=1, ack=0, t=1.0, u=(0.5,))))
        raw = RawEcho()
        await raw.start(size)
        # Alternate blocks, so that both see the same load from the rest of the machine.
        node_samples: list[float] = []
        raw_samples: list[float] = []
        block = 250
        for _ in range(max(1, rounds // block)):
            raw_samples += await raw.block(block)
            node_samples += await exchanges(block)
        await raw.stop()
        assert ex.counters.rejected == ex.counters.failed == 0
        rss_mb = psutil.Process(proc.pid).memory_info().rss / 2**20
        proc.send_signal(signal.SIGTERM)
        out_bytes, _ = await asyncio.wait_for(proc.communicate(), 30)
        final = json.loads(out_bytes.decode().strip().splitlines()[-1])
        assert final["counters"]["served"] >= rounds
        return percentiles(node_samples), percentiles(raw_samples), rss_mb, size
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await client.aclose()
        router.close(0)
        ctx.term()


async def main(rounds: int) -> dict[str, Any]:
    """Run both measurements and return the figures."""
    node, raw, rss_mb, size = await node_round_trips(rounds)
    return {
        "rounds": rounds,
        "frame_bytes": size,
        "raw_zmq": raw,
        "node_exchange": node,
        "ratio_p50": node["p50_us"] / raw["p50_us"],
        "ratio_p99": node["p99_us"] / raw["p99_us"],
        "node_rss_mb": rss_mb,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000)
    figures = asyncio.run(main(parser.parse_args().rounds))
    raw, node = figures["raw_zmq"], figures["node_exchange"]
    print(f"round trips: {figures['rounds']} sequential, {figures['frame_bytes']}-byte frames")
    print(f"raw pyzmq DEALER/ROUTER  p50 {raw['p50_us']:8.1f} us   p99 {raw['p99_us']:8.1f} us")
    print(f"node exchange            p50 {node['p50_us']:8.1f} us   p99 {node['p99_us']:8.1f} us")
    print(f"ratio node/raw           p50 {figures['ratio_p50']:8.2f} x    p99 "
          f"{figures['ratio_p99']:8.2f} x")  # fmt: skip
    print(f"gossip node RSS          {figures['node_rss_mb']:.1f} MB")
    print(json.dumps(figures))
