"""The floor of one process per node: skeleton nodes against the real ones, in the same run.

Run with ``python benchmarks/bench_floor.py`` (about a minute per rate). Is a target on one
process per node out of reach because of how the node is written, or because of the
architecture (a process, an event loop and a ZeroMQ context per node, on this many cores)?
This answers it by measuring three things back to back:

1. raw: CPU per round trip of pyzmq ping-pong between two processes (as
   ``bench_node_cpu.py``), and the capacity with 30 frames in flight;
2. skeleton: ``--graph``'s nodes as :mod:`skeleton_node` processes: the node's sockets,
   Poisson clocks and lock, every frame answered at once, and no protocol, values, metrics or
   MQTT. For each ``--rates`` value: the rate achieved, CPU per exchange (every process, every
   thread), event-loop sleeps per exchange;
3. node: a whole ``gossip up`` (RG) at the same rates, measured the same way
   (:func:`bench_node_cpu.cluster_cpu`), once per ``--periods`` value: ``auto`` is
   ``gossip up``'s default metrics period, and the others show what the reports cost.

Then the ratios: skeleton / raw is what the architecture costs over bare messaging, node /
skeleton what the node's own work costs over the architecture. The skeleton's achieved rate
is a ceiling no implementation of this architecture passes on this machine (it does strictly
less per exchange than any node). Each line ends with the cores other processes kept busy
(:mod:`machine`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import zmq
from bench_node_cpu import cluster_cpu, raw_cpu
from machine import busy_cpu_seconds
from raw_zmq import REQUEST_FRAME, echo_dealer, in_flight_rate

from continuized.coordinator.local.node_commands import default_metrics_period
from continuized.coordinator.machine.ports import free_ports
from continuized.gossip.graph.topology import parse_topology

SKELETON = Path(__file__).with_name("skeleton_node.py")


@dataclass
class Floor:
    """One skeleton cluster run."""

    achieved: float
    cpu_us: float
    sleeps: float
    cores: float
    others_cores: float


async def skeleton_cluster(
    graph: str, rate: float, duration: float, warmup: float, secure: bool
) -> Floor:
    """Run ``graph`` as skeleton nodes at ``rate`` activations/s; measure the steady part."""
    topo = parse_topology(graph)
    ports = free_ports(topo.n)
    keys = [zmq.curve_keypair() if secure else (b"", b"") for _ in range(topo.n)]
    peers: list[list[list[object]]] = [[] for _ in range(topo.n)]
    for (v, w), prob in zip(topo.edges.tolist(), topo.probs.tolist(), strict=True):
        for a, b in ((v, w), (w, v)):  # each end fires the edge's clock at rate * P_e / 2
            peers[a].append([ports[b], rate * prob / 2, keys[b][0].decode()])
    now = time.time()
    start = now + 2.0 + warmup  # the processes import and connect in about a second
    stop = start + duration
    procs = []
    for v in range(topo.n):
        config = {
            "id": v,
            "port": ports[v],
            "peers": peers[v],
            "secret": keys[v][1].decode() if secure else None,
            "public": keys[v][0].decode() if secure else None,
            "request": REQUEST_FRAME.hex(),
            "start": start,
            "stop": stop,
            "end": stop + 1.0,
        }
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                str(SKELETON),
                json.dumps(config),
                stdout=asyncio.subprocess.PIPE,
            )
        )
    await asyncio.sleep(max(0.0, start - time.time()))
    busy_before = busy_cpu_seconds()
    await asyncio.sleep(max(0.0, stop - time.time()))
    busy = busy_cpu_seconds() - busy_before
    results = []
    for proc in procs:
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"a skeleton node failed (exit {proc.returncode})")
        results.append(json.loads(out))
    exchanges = max(1, sum(r["completed"] for r in results))
    cpu = sum(r["cpu"] for r in results)
    return Floor(
        achieved=exchanges / duration,
        cpu_us=cpu / exchanges * 1e6,
        sleeps=sum(r["switches"] for r in results) / exchanges,
        cores=cpu / duration,
        others_cores=max(0.0, busy - cpu) / duration,
    )


async def capacity(in_flight: int = 30, round_trips: int = 20_000) -> float:
    """Raw round trips per second with ``in_flight`` frames outstanding (as in bench_cluster)."""
    async with echo_dealer() as (sock, _):
        return await in_flight_rate(sock, round_trips, in_flight)


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="line:30")
    parser.add_argument(
        "--rates", default="5000,8000,12000", help="asked activations/s, comma-separated"
    )
    parser.add_argument("--duration", type=float, default=15.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds not measured")
    parser.add_argument("--secure", action="store_true", help="CurveZMQ (default: plain)")
    parser.add_argument("--skip-node", action="store_true", help="skeletons only")
    parser.add_argument(
        "--periods",
        default="auto,0.1",
        help="metrics periods of the node runs, comma-separated (auto: gossip up's default)",
    )
    args = parser.parse_args(argv)
    try:
        rates = [float(r) for r in args.rates.split(",")]
    except ValueError:
        parser.error(f"--rates must be numbers separated by commas, got {args.rates!r}")
    auto = default_metrics_period(parse_topology(args.graph).n)
    try:
        periods = [auto if p == "auto" else float(p) for p in args.periods.split(",")]
    except ValueError:
        parser.error(f"--periods must be auto or numbers, comma-separated, got {args.periods!r}")

    raw = await raw_cpu(secure=args.secure)
    cap = await capacity()
    security = "CurveZMQ" if args.secure else "plain"
    print(f"raw pyzmq ({security}): {raw.cpu_per_rt_us:.1f} us CPU per round trip, one in flight")
    print(f"raw capacity: {cap:,.0f} round trips/s with 30 in flight\n")
    print(f"{args.graph}, one process per node, {security} sockets, {args.duration:g} s measured")
    for rate in rates:
        floor = await skeleton_cluster(args.graph, rate, args.duration, args.warmup, args.secure)
        print(
            f"  skeleton asked {rate:>6,.0f}/s: achieved {floor.achieved:>6,.0f}/s "
            f"({floor.achieved / cap:.2f}x raw capacity), {floor.cpu_us:.0f} us CPU per "
            f"exchange ({floor.cpu_us / raw.cpu_per_rt_us:.2f}x raw), {floor.sleeps:.1f} sleeps "
            f"per exchange, {floor.cores:.2f} cores; others {floor.others_cores:.2f} cores"
        )
        for period in [] if args.skip_node else periods:
            node = await cluster_cpu(
                args.graph,
                "rg",
                rate,
                args.duration + args.warmup,
                args.warmup,
                period,
                secure=args.secure,
            )
            print(
                f"  node, reports every {period:g} s: achieved {node.achieved:>6,.0f}/s "
                f"({node.achieved / cap:.2f}x raw capacity), {node.node_us:.0f} us CPU per "
                f"exchange ({node.node_us / raw.cpu_per_rt_us:.2f}x raw, "
                f"{node.node_us / floor.cpu_us:.2f}x skeleton), {node.sleeps:.1f} sleeps per "
                f"exchange, {node.node_cores:.2f} cores; + coordinator "
                f"{node.coordinator_us:.0f} us and broker {node.broker_us:.0f} us per exchange; "
                f"others {node.others_cores:.2f} cores"
            )


if __name__ == "__main__":
    asyncio.run(main())
