"""Cost of CurveZMQ per exchange: a secured node against a plain one, in the same run.

Two real ``gossip node`` processes serve: one started with ``--keys`` (CurveZMQ, registered
with a CURVE coordinator socket, admitting only our client's key), one without. This script
bootstraps both (acting as the coordinator) and runs sequential exchanges against each from a
client :class:`~gossip.exchange.exchanger.Exchanger` on a
:class:`~node.transport.zeromq.ZmqTransport` of the same kind, in alternate blocks of 250 so that
load from elsewhere weighs on both alike. It reports the round trip p50/p99 of each and the served
node's CPU time per exchange (user + system, from psutil, over the measured blocks only), and the
secure/insecure ratios (target: <= 1.3x).

Run: ``python benchmarks/bench_secure.py [--rounds 3000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import zmq
import zmq.asyncio

from continuized.coordinator.membership.registrar import bound_socket
from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.vocabulary import Link, TimeBase
from continuized.gossip.files.keys import COORDINATOR, init_keys
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.wire.schema import Bootstrap, Neighbor, Register, decode, encode
from continuized.node.transport.curve import CurveKeys
from continuized.node.transport.zeromq import ZmqTransport

_BLOCK = 250


@dataclass
class Side:
    """One served node and our client to it."""

    name: str
    proc: asyncio.subprocess.Process
    client: ZmqTransport
    exchanges: Callable[[int], Awaitable[list[float]]]
    samples: list[float] = field(default_factory=list)
    cpu: float = 0.0

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.proc.pid).cpu_times()
        return float(times.user + times.system)


async def start_side(secure: bool, keys: Path, ctx: zmq.asyncio.Context) -> Side:
    """Start a node (secured or not), bootstrap it on line:2 with us as node 1."""
    q = graph_quantities(parse_topology("line:2"))
    params = gossip_params("arg", q.mu_gossip, q.r_max)
    rate = 1.0  # the served node's own clock ticks about twice a second: no interference
    ids = {}
    if secure:
        from continuized.gossip.files.keys import load_allow_list, load_identity

        coord = load_identity(keys / COORDINATOR)
        allow = load_allow_list(keys / COORDINATOR / "allow.json")
        ids = {"server": load_identity(keys / "node-0"), "client": load_identity(keys / "node-1")}
        ctx_reg = bound_socket(
            ctx, "tcp://127.0.0.1:*", secret=coord.secret, allowed={"node-0": allow["node-0"]}
        )
        client = ZmqTransport("tcp://127.0.0.1:0", keys=CurveKeys.of(ids["client"]))
    else:
        ctx_reg = bound_socket(ctx, "tcp://127.0.0.1:*")
        client = ZmqTransport("tcp://127.0.0.1:0")
    with ctx_reg as router:
        address = router.getsockopt_string(zmq.LAST_ENDPOINT)
        extra = ["--keys", str(keys / "node-0")] if secure else ["--name", "plain"]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "continuized.cli.app", "node", "--coordinator", address,
            "--host", "127.0.0.1", "--value", "1.0", "--log-level", "error", *extra,
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        route, frame = await router.recv_multipart()
        reg = decode(frame)
        assert isinstance(reg, Register)
        epoch = time.time() + 0.5
        server_key = ids["server"].public if secure else ""
        client_key = ids["client"].public if secure else ""
        boot = Bootstrap(
            node_id=0, cluster="bench", algorithm="arg", eta=params.eta, c=params.c,
            theta=params.theta, epoch=epoch, rate=rate,
            neighbors=(Neighbor(1, client.address, 0, 1.0, key=client_key),),
            initial_value=(0.0,), broker="", metrics_period=1.0, dim=1,
        )  # fmt: skip
        await router.send_multipart([route, encode(boot)])
    if secure:
        client.trust({0: server_key})
    await client.connect({0: reg.address})
    ex = Exchanger(
        1,
        [Link(0, 0, 1.0)],
        Ledger((1.0,), [0], eta=params.eta),
        params.c,
        TimeBase(epoch, rate),
        timeout=5.0,
        max_timeout=5.0,
    )
    await asyncio.sleep(max(0.0, epoch - time.time()))

    async def exchanges(count: int) -> list[float]:
        samples = []
        for _ in range(count):
            start = time.perf_counter()
            out = ex.initiate(0, time.time())
            assert out is not None
            client.send(out.peer, out.frame)
            while ex.pending:
                incoming = await client.recv()
                answer = ex.receive(incoming.data, time.time(), incoming.sender)
                if answer is not None and incoming.route is not None:
                    client.answer(incoming.route, answer)
            samples.append(time.perf_counter() - start)
        assert ex.counters.forged == ex.counters.rejected == 0
        return samples

    return Side("secure" if secure else "insecure", proc, client, exchanges)


def p50_p99(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 of ``samples`` (seconds), in microseconds."""
    p50, p99 = np.percentile(np.array(samples) * 1e6, [50, 99])
    return float(p50), float(p99)


async def main(rounds: int) -> dict[str, Any]:
    """Run both kinds of exchanges in alternate blocks; return the figures."""
    ctx = zmq.asyncio.Context()
    sides: list[Side] = []
    with tempfile.TemporaryDirectory() as tmp:
        init_keys(Path(tmp), ["node-0", "node-1"], zmq.curve_keypair)
        try:
            for secure in (True, False):
                sides.append(await start_side(secure, Path(tmp), ctx))
            for side in sides:
                await side.exchanges(200)  # warm-up: connection, first allocations
            for _ in range(max(1, rounds // _BLOCK)):
                for side in sides:
                    before = side.cpu_seconds()
                    side.samples += await side.exchanges(_BLOCK)
                    side.cpu += side.cpu_seconds() - before
        finally:
            for side in sides:
                side.proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(side.proc.communicate(), 30)
                await side.client.aclose()
            ctx.term()
    out: dict[str, Any] = {"rounds": rounds}
    for side in sides:
        p50, p99 = p50_p99(side.samples)
        out[side.name] = {
            "p50_us": p50,
            "p99_us": p99,
            "cpu_us_per_exchange": side.cpu / len(side.samples) * 1e6,
        }
    sec, plain = out["secure"], out["insecure"]
    out["ratio_p50"] = sec["p50_us"] / plain["p50_us"]
    out["ratio_p99"] = sec["p99_us"] / plain["p99_us"]
    out["ratio_cpu"] = sec["cpu_us_per_exchange"] / plain["cpu_us_per_exchange"]
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3000)
    figures = asyncio.run(main(parser.parse_args().rounds))
    print(f"sequential exchanges: {figures['rounds']} per kind, alternate blocks of {_BLOCK}")
    for kind in ("secure", "insecure"):
        f = figures[kind]
        print(
            f"{kind:9s} round trip p50 {f['p50_us']:7.1f} us  p99 {f['p99_us']:8.1f} us   "
            f"served node CPU {f['cpu_us_per_exchange']:6.1f} us/exchange"
        )
    print(
        f"secure/insecure: p50 {figures['ratio_p50']:.2f}x  p99 {figures['ratio_p99']:.2f}x  "
        f"CPU {figures['ratio_cpu']:.2f}x  (target <= 1.3x)"
    )
    print(json.dumps(figures))
