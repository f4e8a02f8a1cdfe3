"""A model-sized exchange between two processes against raw pyzmq multipart of the same bytes.

Both measurements have the same shape, so their ratio means the same on any machine: a client
in this process sends, waits for the answer, and sends again, to a server in a child process,
over loopback TCP.

1. raw: a pyzmq ROUTER in a child that answers each multipart message with one of the same
   size (a reply carries as many bytes as a request: ``dx`` and ``dz``), against a DEALER here.
   It sends and receives with ``copy=False``: the floor for these bytes.
2. exchange: a child runs an :class:`~gossip.exchange.exchanger.Exchanger` on a
   :class:`~gossip.model.parameters.ParameterLedger` of ``--dim`` parameters and a
   :class:`~node.transport.zeromq.ZmqTransport` (what a training node runs), and serves; this
   process is the other end of the edge, and each round trip is one whole A²CiD² exchange:
   ``x`` and ``z`` read from the ledger and sent as raw parts, the server's decode, mixing,
   flow and reply, and our decode. Both ends hand ``Exchanger.settle`` to the transport's
   ``when_sent`` after a send, as a node does, so the ledger updates a model's ledger leaves
   for later (:mod:`gossip.model.parameters`, "Lazy booking") run once the frame has left
   (:mod:`node.transport.departures`), while it is on the wire.

The two run in alternate blocks so that load from elsewhere weighs on both alike. Throughput
is the bytes of a round trip (request and reply) over its median time.

With two cores or more, this process runs on one core and the child on another (``--no-pin``
to let the kernel place them), as two nodes on two machines would: unpinned, where the kernel
put the four busy threads (two processes, each with ZeroMQ's I/O thread) moved raw pyzmq's
round trip between 7 and 11 ms from run to run on the 2-core machine this was written on.

Both are measured for a float64 model and for a float32 one, whose frames carry float32 (half
the bytes; its ledger still sums in float64: :mod:`gossip.model.parameters`).

Run: ``python benchmarks/bench_train_wire.py [--dim 1000000] [--rounds 60] [--dtype float32]
[--no-pin]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

import numpy as np
import zmq
from _project import PREFIX, project

Exchanger = project("gossip.exchange.exchanger").Exchanger
Link = project("gossip.exchange.vocabulary").Link
TimeBase = project("gossip.exchange.vocabulary").TimeBase
ParameterLedger = project("gossip.model.parameters").ParameterLedger
Request = project("gossip.wire.schema").Request
encode = project("gossip.wire.schema").encode
frame_size = project("gossip.wire.schema").frame_size
ZmqTransport = project("node.transport.zeromq").ZmqTransport

_ECHO = """
import sys, zmq
ctx = zmq.Context()
sock = ctx.socket(zmq.ROUTER)
port = sock.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
while True:
    frames = sock.recv_multipart(copy=False)
    if frames[-1].bytes == b"quit":
        break
    sock.send_multipart(frames, copy=False)
"""

# The serving end: node 0 of a line:2 edge, its own ledger of DIM parameters, serving requests.
_SERVER = f"""
import asyncio, sys, time
import numpy as np
from {PREFIX}gossip.exchange.exchanger import Exchanger
from {PREFIX}gossip.exchange.vocabulary import Link, TimeBase
from {PREFIX}gossip.model.parameters import ParameterLedger
from {PREFIX}node.transport.zeromq import ZmqTransport

async def main(dim, epoch, dtype):
    async with ZmqTransport("tcp://127.0.0.1:0") as transport:
        print(transport.address, flush=True)
        ledger = ParameterLedger(np.zeros(dim, dtype=dtype), [0], eta=0.05)
        ex = Exchanger(0, [Link(0, 1, 1.0)], ledger, 2.0, TimeBase(epoch, 1.0),
                       timeout=30.0, max_timeout=30.0)
        while True:
            incoming = await transport.recv()
            if incoming.data == b"quit":
                return
            answer = ex.receive(incoming.data, time.time(), incoming.route)
            if answer and incoming.route is not None:
                transport.answer(incoming.route, answer)
            transport.when_sent(ex.settle)  # as a node does: the booking once the reply left

asyncio.run(main(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]))
"""


_CORES: tuple[set[int], set[int]] | None = None
"""The cores of this process and of its children, if pinned."""


async def _child(code: str, *args: str) -> tuple[asyncio.subprocess.Process, str]:
    if _CORES is not None:  # first thing in the child: its ZeroMQ threads inherit it
        code = f"import os; os.sched_setaffinity(0, {_CORES[1]!r})\n{code}"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, *args, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    return proc, (await proc.stdout.readline()).decode().strip()


async def raw_block(port: str, parts: list[Any], rounds: int) -> list[float]:
    """Sequential multipart round trips to the echo; their durations in seconds."""
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    samples = []
    try:
        for i in range(rounds + 2):
            start = time.perf_counter()
            dealer.send_multipart(parts, copy=False)
            back = dealer.recv_multipart(copy=False)
            assert len(back) == len(parts)
            if i >= 2:  # connection set-up, first allocations
                samples.append(time.perf_counter() - start)
    finally:
        dealer.close()
        ctx.term()
    return samples


async def main(dim: int, rounds: int, block: int, dtype: str = "float64") -> dict[str, Any]:
    """Run both measurements for a model of ``dtype`` and return the figures."""
    epoch = time.time()
    rate = 1.0
    server, address = await _child(_SERVER, str(dim), repr(epoch), dtype)
    echo, port = await _child(_ECHO)
    client = ZmqTransport("tcp://127.0.0.1:0")
    try:
        await client.connect({0: address})
        rng = np.random.default_rng(0)
        ledger = ParameterLedger(rng.standard_normal(dim).astype(dtype), [0], eta=0.05)
        ex = Exchanger(
            1, [Link(0, 0, 1.0)], ledger, 2.0, TimeBase(epoch, rate), timeout=30.0, max_timeout=30.0
        )
        mass = ledger.state_values(ex.timebase.t(time.time()))[0].sum()

        async def exchanges(count: int) -> list[float]:
            samples = []
            for _ in range(count):
                start = time.perf_counter()
                out = ex.initiate(0, time.time())
                assert out is not None
                client.send(out.peer, out.frame)
                client.when_sent(ex.settle)  # as a node does: the rest, once the request left
                while ex.pending:
                    incoming = await client.recv()
                    ex.receive(incoming.data, time.time())
                samples.append(time.perf_counter() - start)
            return samples

        zeros = np.zeros(dim, dtype=dtype)
        probe = Request(src=1, edge=0, seq=1, ack=0, t=1.0, u=zeros, z=zeros)
        frame = encode(probe)
        request_bytes = frame_size(frame)
        await exchanges(2)  # warm-up
        node_samples: list[float] = []
        raw_samples: list[float] = []
        for _ in range(max(1, rounds // block)):
            raw_samples += await raw_block(port, list(frame), block)
            node_samples += await exchanges(block)
        assert ex.counters.rejected == ex.counters.failed == 0
        t_now = ex.timebase.t(time.time())
        _ = mass, t_now
    finally:
        client.send(0, b"quit")
        await asyncio.sleep(0.2)
        await client.aclose()
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.connect(f"tcp://127.0.0.1:{port}")
        sock.send(b"quit")
        sock.close()
        ctx.term()
        for proc in (server, echo):
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    node_p50, raw_p50 = float(np.median(node_samples)), float(np.median(raw_samples))
    moved = 2 * request_bytes  # request and reply, each u and z (dx and dz) and a small map
    return {
        "dim": dim,
        "dtype": dtype,
        "rounds": len(node_samples),
        "bytes_per_round_trip": moved,
        "raw_p50_ms": raw_p50 * 1e3,
        "exchange_p50_ms": node_p50 * 1e3,
        "raw_mb_per_s": moved / raw_p50 / 1e6,
        "exchange_mb_per_s": moved / node_p50 / 1e6,
        "throughput_ratio": raw_p50 / node_p50,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument(
        "--dtype", choices=("float32", "float64"), action="append", help="default: both"
    )
    parser.add_argument(
        "--no-pin", action="store_true", help="let the kernel place both processes' threads"
    )
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if not args.no_pin and len(cores) >= 2:
        _CORES = ({cores[0]}, {cores[1]})
        os.sched_setaffinity(0, _CORES[0])
    placed = f"this process on core {cores[0]}, the child on {cores[1]}" if _CORES else "unpinned"
    print(f"cores: {placed}")
    for dtype in args.dtype or ["float32", "float64"]:
        figures = asyncio.run(main(args.dim, args.rounds, args.block, dtype))
        print(
            f"{figures['dim']} {dtype} parameters, {figures['bytes_per_round_trip'] / 1e6:.1f} "
            f"MB per round trip, {figures['rounds']} round trips each"
        )
        print(f"raw pyzmq multipart   p50 {figures['raw_p50_ms']:8.2f} ms  "
              f"{figures['raw_mb_per_s']:8.0f} MB/s")  # fmt: skip
        print(f"A2CiD2 exchange       p50 {figures['exchange_p50_ms']:8.2f} ms  "
              f"{figures['exchange_mb_per_s']:8.0f} MB/s")  # fmt: skip
        print(f"throughput exchange/raw  {figures['throughput_ratio']:.2f} x (goal >= 0.5)")
        print(json.dumps(figures))
