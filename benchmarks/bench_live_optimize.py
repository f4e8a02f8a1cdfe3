"""Live decentralized optimization against gossip: node CPU per exchange, and the band.

Run with ``python benchmarks/bench_live_optimize.py`` (a few minutes). In one run it starts
two local clusters one after the other on ``--graph`` (default grid:4x4) at ``--rate``
activations per second (default 500):

1. gossip (ARG, one-hot values) for ``--duration`` seconds: the node CPU per exchange;
2. ``--problem`` (default logistic:0.01) on ``--data`` / ``--split`` (breast-cancer, label:1,
   d = 30) until ``sum_v |x_v - x*|^2 <= --until``: the node CPU per exchange over the steady
   part, the ratio to gossip's, and how many of its measured points lie inside the optimization
   simulator's 5-95% band (``coordinator.agreement.optimization_agreement``, ``--runs``
   simulated runs), with the dual sums' final drift.

An optimization exchange costs one ``grad f_v^*`` (a few Newton steps for logistic regression)
at each end and vectors of d numbers instead of 1: the ratio is that cost.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

from bench_node_cpu import cluster_cpu

from coordinator.agreement import optimization_agreement


async def main(argv: Sequence[str] | None = None) -> None:
    """Run both clusters and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="grid:4x4")
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--duration", type=float, default=15.0, help="seconds of gossip")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds of optimization")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--problem", default="logistic:0.01")
    parser.add_argument("--data", default="breast-cancer")
    parser.add_argument("--split", default="label:1")
    parser.add_argument("--until", type=float, default=1e-6)
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args(argv)

    gossip = await cluster_cpu(args.graph, "arg", args.rate, args.duration, args.warmup, 0.1)
    opt = await cluster_cpu(
        args.graph,
        "arg",
        args.rate,
        args.timeout,
        args.warmup,
        0.1,
        until=args.until,
        optimize=(args.problem, args.data, args.split),
    )
    state = opt.state
    assert state is not None
    assert state.optimization is not None
    assert state.topology is not None
    task = state.optimization.task
    print(f"{args.graph} at {args.rate:g}/s asked")
    print(
        f"  gossip (arg): achieved {gossip.achieved:,.0f}/s, node CPU {gossip.node_us:.0f} us "
        f"per exchange, round trip p50 {gossip.rtt_p50_ms or 0:.2f} ms"
    )
    print(
        f"  {args.problem} on {args.data} ({args.split}, d = {task.dim}): achieved "
        f"{opt.achieved:,.0f}/s, node CPU {opt.node_us:.0f} us per exchange, round trip p50 "
        f"{opt.rtt_p50_ms or 0:.2f} ms"
    )
    print(f"  node CPU per exchange, optimization / gossip = {opt.node_us / gossip.node_us:.1f}x")
    final = state.optimization.final
    reached = f"t = {state.t_eps:.0f}" if state.t_eps is not None else "not reached"
    drift = f"{final.dual_drift:.1e}" if final is not None else "-"
    print(f"  sum_v |x_v - x*|^2 <= {args.until:g}: {reached}; final dual sums drift {drift}")
    agreement = optimization_agreement(
        state.history,
        state.topology,
        task.problems,
        task.dual,
        runs=args.runs,
        seed=1,
        t_min=0.02 / task.theta,
        floor=args.until,
    )
    print(
        f"  inside the simulator's 5-95% band ({args.runs} runs): {agreement.inside:.0%} of "
        f"{len(agreement.t)} points; median offset {agreement.log_ratio_median:+.2f} decades"
    )


if __name__ == "__main__":
    asyncio.run(main())
