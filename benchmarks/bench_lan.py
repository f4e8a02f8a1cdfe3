"""Benchmark of the live cluster on an emulated LAN: lambda* and fidelity against latency and
clock skew, and the rule a Raspberry Pi user can apply.

Run with ``python benchmarks/bench_lan.py`` (about 20 to 40 minutes on two cores; ``--quick``
for a few minutes). The LAN is the nodes' fault-injecting transport (:mod:`node.transport.faults`,
``--fault latency_ms=L,jitter_ms=L/5,drop=0.001``): every frame is held ``L`` ms, plus or minus
the jitter, in order per connection, at both ends, and 0.1% of the frames are lost (a lost
frame is a lost exchange message, retried after the node's timeout: harsher than a lost TCP
packet, which TCP resends). The kernel here has no ``tc netem``; a userspace relay would cost
a process and two copies per link, where the transport's timer costs one callback per frame.

It prints:

1. the emulated LAN's round trip by ping-pong (two ZeroMQ transports, each behind the fault
   wrapper, one message in flight) against the setting ``2 L``: an asyncio timer fires on the
   loop's next turn after its time, so short settings come out longer;
2. for each graph (line:30 and grid:4x4, three nodes per process, "per host"), each latency
   and each clock skew (per host: ``skew_ms=S``, an offset uniform in ``[-S, +S]`` drawn from
   the host's seed): each rate's run (ARG to ``--until``) with its verdict as in
   ``bench_cluster.py`` (achieved >= 95% of asked, kept up, and an exact curve the model
   produces among its own simulator runs), and lambda*, the highest rate that passed;
3. the rule: ``k = lambda* * RTT / n`` per row (RTT the measured ping-pong round trip), and
   the smallest k over the latency-bound rows, the k of ``rate <= k * n / RTT``.

The machine is shared: compare rows within one run (ratios), not with another run's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from bench_cluster import agreement_of, cluster_run
from machine import background_cores
from raw_zmq import REQUEST_FRAME

from continuized.coordinator.figures.lanrule import skew_tolerance
from continuized.coordinator.local.node_commands import default_metrics_period
from continuized.gossip.graph.topology import parse_topology
from continuized.node.transport.faults import FaultSpec, FaultyTransport
from continuized.node.transport.zeromq import ZmqTransport

ALPHA = 0.005
"""A curve is the model's unless rarer than this among its own runs (as bench_cluster)."""


def lan_fault(latency_ms: float, skew_ms: float = 0.0, seed: int | None = None) -> str:
    """The ``--fault`` of one emulated LAN: latency, a fifth of it as jitter, 0.1% loss."""
    if latency_ms <= 0 and skew_ms <= 0:
        return ""
    parts = []
    if latency_ms > 0:
        parts.append(f"latency_ms={latency_ms:g},jitter_ms={latency_ms / 5:g},drop=0.001")
    if skew_ms > 0:
        parts.append(f"skew_ms={skew_ms:g}")
    return ",".join(parts)


async def ping_pong(latency_ms: float, round_trips: int = 300) -> tuple[float, float]:
    """Round trip p50 and p99 (ms) through two faulty ZeroMQ transports, one frame in flight."""
    spec = FaultSpec(latency_ms=latency_ms, jitter_ms=latency_ms / 5)
    a_inner = ZmqTransport("tcp://127.0.0.1:0", "127.0.0.1")
    b_inner = ZmqTransport("tcp://127.0.0.1:0", "127.0.0.1")
    a, b = FaultyTransport(a_inner, spec, seed=1), FaultyTransport(b_inner, spec, seed=2)
    try:
        await a.connect({1: b.address})
        await b.connect({})

        async def echo() -> None:
            while True:
                frame = await b.recv()
                if frame.route is not None:
                    b.answer(frame.route, frame.data)

        server = asyncio.create_task(echo(), name="echo")
        rtts: list[float] = []
        try:
            for i in range(round_trips + 20):
                start = time.perf_counter()
                a.send(1, REQUEST_FRAME)
                await a.recv()
                if i >= 20:  # after the connection's warm-up
                    rtts.append(time.perf_counter() - start)
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
    finally:
        await a.aclose()
        await b.aclose()
    ms = np.array(rtts) * 1e3
    return float(np.median(ms)), float(np.quantile(ms, 0.99))


@dataclass
class Row:
    graph: str
    latency_ms: float
    skew_ms: float
    rtt_ms: float  # measured by ping-pong (loopback: the plain transport's)
    best: float = 0.0
    fidelity: str = ""  # at the best rate: share inside the band, median offset


async def run_row(row: Row, rates: Sequence[float], until: float, runs: int) -> None:
    """Climb the rates for one row; stop after two failures in a row."""
    n = parse_topology(row.graph).n
    period = default_metrics_period(n, 3)
    fault = lan_fault(row.latency_ms, row.skew_ms)
    node_args = ("--fault", fault) if fault else ()
    failures = 0
    for rate in rates:
        others = await background_cores()
        summary, state, wall, _, _ = await cluster_run(
            row.graph, "arg", rate, until, give_up=150.0, period=period,
            node_args=node_args, nodes_per_process=3,
        )  # fmt: skip
        exact_sum = summary.mass_drift_rel is not None and summary.mass_drift_rel <= 1e-9
        if state.exact or state.history:
            ag = agreement_of(state, until, runs)
            typical = ag.typical(ALPHA)
            fid = f"inside {ag.inside:4.0%} offset {ag.log_ratio_median:+.2f} dec"
        else:
            typical, fid = False, "no curve"
        keeps_up = (summary.rate_achieved or 0.0) >= 0.95 * rate and summary.kept_up is not False
        ok = summary.reached and keeps_up and typical
        print(
            f"    {row.graph:9} L {row.latency_ms:4g} ms skew ±{row.skew_ms:2g} ms  rate "
            f"{rate:6.0f}/s: achieved {summary.rate_achieved or float('nan'):6.0f}/s, kept up "
            f"{summary.kept_up}, {fid} (typical {typical}), rtt p50 "
            f"{summary.rtt_p50_ms or 0:.2f} ms, drift {summary.mass_drift_rel or 0:.1e} "
            f"(exact {exact_sum}), wall {wall:.1f} s, {others:.2f} cores busy -> "
            f"{'ok' if ok else 'NO'}",
            flush=True,
        )
        if ok:
            row.best, row.fidelity, failures = rate, fid, 0
        else:
            failures += 1
            if failures >= 2:
                break


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default="line:30,grid:4x4")
    parser.add_argument("--latencies", default="0,0.1,1,5", help="one-way, ms (0: loopback)")
    parser.add_argument("--skews", default="5,50", help="per host, ms, at --skew-latency")
    parser.add_argument("--skew-latency", type=float, default=1.0)
    parser.add_argument("--rates", default="100,200,400,800,1600,3200")
    parser.add_argument("--until", type=float, default=1e-6)
    parser.add_argument("--runs", type=int, default=100, help="simulator runs for the band")
    parser.add_argument("--quick", action="store_true", help="grid:4x4, 1 ms and 50 ms skew")
    args = parser.parse_args(argv)
    if args.quick:
        args.graphs, args.latencies, args.skews = "grid:4x4", "1", "50"

    latencies = [float(x) for x in args.latencies.split(",") if x]
    skews = [float(x) for x in args.skews.split(",") if x]
    rates = [float(r) for r in args.rates.split(",")]

    print("emulated LAN round trip by ping-pong (one frame in flight), against the setting")
    rtt: dict[float, float] = {}
    for latency in sorted({*latencies, args.skew_latency}):
        p50, p99 = await ping_pong(latency)
        rtt[latency] = p50
        ratio = p50 / (2 * latency) if latency else float("nan")
        print(
            f"  one way {latency:4g} ms: set {2 * latency:5.2f} ms, measured p50 {p50:6.2f} ms "
            f"({ratio:.2f}x), p99 {p99:6.2f} ms"
        )

    rows: list[Row] = []
    for graph in args.graphs.split(","):
        print(f"\n  {graph}, 3 nodes per process, ARG to {args.until:g}")
        cases = [(lat, 0.0) for lat in latencies] + [(args.skew_latency, s) for s in skews]
        for latency, skew in cases:
            row = Row(graph, latency, skew, rtt[latency])
            await run_row(row, rates, args.until, args.runs)
            rows.append(row)

    print(
        "\n  graph       one way  skew   RTT (ms)  lambda*  k = lambda* RTT / n  "
        "fidelity at lambda*"
    )
    # A row is latency-bound if its lambda* is below its graph's loopback lambda* (the same
    # machine, the same run): only those rows measure k; the others give k a lower bound.
    loopback = {r.graph: r.best for r in rows if r.latency_ms == 0 and r.skew_ms == 0}
    ks, bounds = [], []
    for row in rows:
        n = parse_topology(row.graph).n
        k = row.best * row.rtt_ms / 1e3 / n
        if row.latency_ms > 0 and row.skew_ms == 0 and row.best:
            bound = row.best >= loopback.get(row.graph, math.inf)
            (bounds if bound else ks).append(k)
        tol = skew_tolerance(n, row.best) * 1e3 if row.best else float("nan")
        print(
            f"  {row.graph:10} {row.latency_ms:5g} ms ±{row.skew_ms:3g} ms {row.rtt_ms:8.2f} "
            f"{row.best:8.0f}  {k:8.3f}             {row.fidelity or '-'} (skew tolerance at "
            f"lambda* {tol:.1f} ms)"
        )
    if ks:
        print(f"\n  rule: rate <= k * n / RTT with k = {min(ks):.3f} (the smallest k of the "
              "latency-bound rows: lambda* below loopback's)")  # fmt: skip
    if bounds:
        print(f"  rows as fast as loopback (the CPU, not the LAN, bound them): k >= "
              f"{max(bounds):.3f}")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
