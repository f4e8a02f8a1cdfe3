"""In-process exchange round trips: the core's CPU per exchange, with no sockets.

Two :class:`~gossip.exchange.exchanger.Exchanger` ends of one edge live in this process; each
exchange is one end's ``initiate``, the other's ``receive`` of the request (it serves: mixes,
computes the flow, books it, encodes the reply), and the first end's ``receive`` of the reply (it
applies it and frees its lock). The ends take turns initiating. That is the whole per-exchange
path of the protocol (what a node process runs besides its sockets and its event loop).

Blocks of ``--block`` exchanges are timed in CPU time (``time.process_time``: the machine's
other processes do not count, only what they do to the caches) and in wall time; the median
block gives the figures.

Run: ``python benchmarks/bench_exchange_core.py [--exchanges 40000] [--dim 1]``. It prints
one JSON line: microseconds per exchange (CPU and wall, median block) and the exchanges per
second of CPU that makes.
To compare two trees, run ``scripts/bench-compare BASE [HEAD] --cases core``: it runs this
with each tree first on ``PYTHONPATH``, alternately (a tree from before gossip/ was laid out by
concept imports the same classes from their old modules).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from _project import project

try:
    Exchanger = project("gossip.exchange.exchanger").Exchanger
    Link = project("gossip.exchange.vocabulary").Link
    TimeBase = project("gossip.exchange.vocabulary").TimeBase
    Ledger = project("gossip.model.ledger").Ledger
except ImportError:  # a tree from before gossip/ was laid out by concept (scripts/bench-compare)
    Ledger = project("gossip.ledger").Ledger
    Link = project("gossip.protocol").Link
    TimeBase = project("gossip.protocol").TimeBase
    Exchanger = project("gossip.exchange").Exchanger


def pair(dim: int) -> tuple[Exchanger, Exchanger]:
    """Nodes 0 and 1 of ``line:2`` with ARG-like constants; one unit of t per second."""
    timebase = TimeBase(epoch=0.0, rate=1.0)
    return (
        Exchanger(0, [Link(0, 1, 1.0)], Ledger([1.0] * dim, [0], eta=0.01), 0.5, timebase),
        Exchanger(1, [Link(0, 0, 1.0)], Ledger([0.0] * dim, [0], eta=0.01), 0.5, timebase),
    )


def run(exchanges: int, block: int, dim: int) -> dict[str, float]:
    """Return the microseconds per exchange (CPU and wall, median block) of ``exchanges``."""
    ends = pair(dim)
    routes = (b"0", b"1")
    now = 1.0
    cpu: list[float] = []
    wall: list[float] = []
    for _ in range(exchanges // block):
        start, start_cpu = time.perf_counter(), time.process_time()
        for k in range(block):
            who = k & 1
            me, peer = ends[who], ends[1 - who]
            now += 1e-4
            out = me.initiate(0, now)
            assert out is not None
            answer = peer.receive(out.frame, now, routes[who])
            assert answer
            me.receive(answer, now)
        cpu.append((time.process_time() - start_cpu) / block)
        wall.append((time.perf_counter() - start) / block)
    for end in ends:
        assert end.counters.rejected == end.counters.refused == end.counters.failed == 0
        assert end.pending == 0
    per_cpu, per_wall = statistics.median(cpu), statistics.median(wall)
    return {
        "exchanges_per_cpu_s": round(1.0 / per_cpu),
        "cpu_us_per_exchange": round(per_cpu * 1e6, 2),
        "wall_us_per_exchange": round(per_wall * 1e6, 2),
    }


def main() -> None:
    """Parse the arguments, run, print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exchanges", type=int, default=40_000, help="exchanges timed")
    parser.add_argument("--block", type=int, default=1000, help="exchanges per timed block")
    parser.add_argument("--dim", type=int, default=1, help="dimension of the values")
    args = parser.parse_args()
    print(json.dumps({"dim": args.dim, **run(args.exchanges, args.block, args.dim)}))


if __name__ == "__main__":
    main()
