"""Live decentralized optimization against gossip: node CPU per exchange, and the band.

Run with ``python benchmarks/bench_live_optimize.py`` (a few minutes). In one run it starts
two local clusters one after the other on ``--graph`` (default grid:4x4) at ``--rate``
activations per second (default 500):

1. gossip (RG, one-hot values) for ``--duration`` seconds: the node CPU per exchange;
2. ``--problem`` (default logistic:0.01) on ``--data`` / ``--split`` (breast-cancer, label:1,
   d = 30) until ``sum_v |x_v - x*|^2 <= --until``: the node CPU per exchange over the steady
   part, the ratio to gossip's, and how many of its measured points lie inside the optimization
   simulator's 5-95% band (``coordinator.figures.agreement.optimization_agreement``, ``--runs``
   simulated runs), with the dual sums' final drift.

An optimization exchange costs one ``grad f_v^*`` (Newton for logistic regression) at each
end and vectors of d numbers instead of 1: the ratio is that cost.

First (``--solver-only`` stops there, a few seconds), the solver alone, without sockets: the
values of ``y`` that node ``--node`` meets in one simulated run of the same problem and graph
are replayed through its ``grad f_v^*``, in alternate blocks, by the node's own path (one
shard, a first-order correction from the kept Cholesky factor, a certified last step) and by
the batched safeguarded solver it used before (``newton_conjugate``, as the simulator calls
it): microseconds per call, Newton steps per call, the largest residual ``|grad f(x) - y|``.
Then the load average, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from bench_node_cpu import cluster_cpu

from continuized.coordinator.figures.agreement import optimization_agreement
from continuized.coordinator.local.node_commands import default_metrics_period
from continuized.gossip.datasets import load_node_shard
from continuized.gossip.dual.experiment import algorithm_params
from continuized.gossip.dual.network import build_network
from continuized.gossip.dual.simulate import simulate_optimization
from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.vocabulary import Link, TimeBase
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.problems import make_local_problem
from continuized.gossip.problems.logistic import newton_conjugate


def _node_ys(graph: str, problem: str, data: str, split: str, node: int, t_end: float) -> Any:
    """The ``y`` at which node ``node`` evaluates ``grad f^*`` in one simulated acd run."""
    topo = parse_topology(graph)
    problems = build_network(problem, data, split, topo.n).problems
    params = algorithm_params("acd", graph_quantities(topo), problems)
    seen: list[Any] = []
    solve = problems.grad_conjugate

    def recording(nodes: Any, y: Any, x0: Any = None) -> Any:
        for i in np.flatnonzero(np.asarray(nodes) == node):
            seen.append(np.array(y[i]))
        return solve(nodes, y, x0)

    problems.grad_conjugate = recording  # type: ignore[method-assign]
    grid = np.linspace(0.0, t_end, 20)
    simulate_optimization(topo, problems, params, grid, 1, 0, engine="numpy")  # it records
    return np.array(seen)


def _exchange_cpu(dim: int, values: Sequence[Any] | None, rounds: int = 2000) -> float:
    """CPU microseconds per exchange (both ends, no sockets) between two in-process nodes."""
    timebase = TimeBase(0.0, 1.0)
    ends = []
    for v in (0, 1):
        extra = {} if values is None else {"exchange_value": values[v]}
        ledger = Ledger([0.0] * dim, [0], eta=1e-3)
        link = [Link(0, 1 - v, 1.0, 0.002)]
        ends.append(Exchanger(v, link, ledger, 0.05, timebase, timeout=1.0, **extra))
    a, b = ends
    began = time.process_time()
    for i in range(rounds):
        now = 1.0 + i
        out = a.initiate(0, now)
        assert out is not None
        answer = b.receive(out.frame, now + 0.1, b"route")
        assert isinstance(answer, bytes)
        a.receive(answer, now + 0.2)
    return (time.process_time() - began) / rounds * 1e6


def _batched(problem: Any) -> Any:
    """``y -> grad f^*(y)`` by the batched solver from its previous answer (the old path)."""
    box = [np.zeros((1, problem.dim))]

    def value(y: Any) -> Any:
        box[0] = newton_conjugate(
            problem.shard.A[None], problem.s[None], problem._w, problem.lam, y[None], box[0]
        )
        return box[0][0]

    return value


def protocol_ab(args: argparse.Namespace) -> None:
    """The protocol's CPU per exchange in-process: gossip against optimization, both solvers."""
    n = parse_topology(args.graph).n
    pair = [
        make_local_problem(args.problem, load_node_shard(args.data, args.split, n, v), node=v)
        for v in (args.node, args.node + 1)
    ]
    dim = pair[0].dim
    gossip = _exchange_cpu(1, None)
    vectors = _exchange_cpu(dim, [lambda y: y, lambda y: y])
    own = _exchange_cpu(dim, [p.grad_conjugate for p in pair])
    old = _exchange_cpu(dim, [_batched(p) for p in pair]) if hasattr(pair[0], "_fast") else own
    print(
        f"  in-process exchange, CPU of both ends (no sockets): gossip d = 1 {gossip:.0f} us; "
        f"d = {dim} without solver {vectors:.0f} us; {args.problem} {own:.0f} us with the "
        f"node's own solver, {old:.0f} us with the batched one"
    )


def solver_ab(args: argparse.Namespace) -> None:
    """Replay one node's ``y`` through its own solver and the batched one; print the costs."""
    ys = _node_ys(args.graph, args.problem, args.data, args.split, args.node, args.t_replay)
    n = parse_topology(args.graph).n
    shard = load_node_shard(args.data, args.split, n, args.node)
    fast = make_local_problem(args.problem, shard, node=args.node)
    if not hasattr(fast, "_fast"):
        print(f"  {args.problem}: closed-form grad f^*, no solver to compare")
        return
    w, lam, tol = fast._w, fast.lam, fast.tol
    warm = np.zeros((1, shard.dim))
    spent = {"own": 0.0, "batched": 0.0}
    worst = error = 0.0
    block = 100
    for start in range(0, len(ys), block):
        rows = ys[start : start + block]
        began = time.process_time()
        xs = [fast.grad_conjugate(y) for y in rows]
        spent["own"] += time.process_time() - began
        began = time.process_time()
        for y in rows:
            warm = newton_conjugate(shard.A[None], fast.s[None], w, lam, y[None], warm, tol)
        spent["batched"] += time.process_time() - began
        pairs = list(zip(xs, rows, strict=True))
        worst = max([worst] + [float(np.linalg.norm(fast.grad(x) - y)) for x, y in pairs])
        # The error the tolerance adds, against a solve to 1e-14 (every 10th call: not timed).
        for x, y in pairs[::10]:
            exact = newton_conjugate(shard.A[None], fast.s[None], w, lam, y[None], x[None], 1e-14)
            error = max(error, float(np.linalg.norm(x - exact[0])))
    k = len(ys)
    own, batched = spent["own"] / k * 1e6, spent["batched"] / k * 1e6
    moves = np.linalg.norm(np.diff(ys, axis=0), axis=1)
    print(
        f"  grad f^* of node {args.node} ({shard.m} rows, d = {shard.dim}), {k} calls replayed "
        f"from a simulated run to t = {args.t_replay:g} (|dy| median {np.median(moves):.1e}):"
    )
    print(
        f"    own path {own:.0f} us per call ({fast._fast.newton_steps / k:.2f} Newton steps), "
        f"batched solver {batched:.0f} us: {batched / own:.1f}x; largest residual "
        f"{worst:.1e} (tol {tol:g}); largest |x - grad f^*(y)| {error:.1e} (bound tol / mu "
        f"= {tol / lam:.0e})"
    )


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
    parser.add_argument("--node", type=int, default=5, help="node whose solver is replayed")
    parser.add_argument("--t-replay", type=float, default=8000.0)
    parser.add_argument("--solver-only", action="store_true")
    args = parser.parse_args(argv)

    print(f"{args.graph} at {args.rate:g}/s asked; load average {os.getloadavg()[0]:.1f}")
    solver_ab(args)
    protocol_ab(args)
    if args.solver_only:
        return

    # RG: ARG's gossip reaches the floor of rounding within seconds at a high rate, and the run
    # then ends before the warm-up is over; an exchange costs the same for both.
    # The metrics period of `gossip up`: reports every 0.1 s cost 30 processes a share of the
    # two cores that makes optimization fall behind at rates it passes otherwise.
    period = default_metrics_period(parse_topology(args.graph).n)
    gossip = await cluster_cpu(args.graph, "rg", args.rate, args.duration, args.warmup, period)
    opt = await cluster_cpu(
        args.graph,
        "arg",
        args.rate,
        args.timeout,
        args.warmup,
        period,
        until=args.until,
        optimize=(args.problem, args.data, args.split),
    )
    state = opt.state
    assert state is not None
    assert state.optimization is not None
    assert state.topology is not None
    task = state.optimization.task
    print(
        f"  gossip (rg): achieved {gossip.achieved:,.0f}/s, node CPU {gossip.node_us:.0f} us "
        f"per exchange, round trip p50 {gossip.rtt_p50_ms or 0:.2f} ms"
    )
    print(
        f"  {args.problem} on {args.data} ({args.split}, d = {task.dim}): achieved "
        f"{opt.achieved:,.0f}/s, node CPU {opt.node_us:.0f} us per exchange, round trip p50 "
        f"{opt.rtt_p50_ms or 0:.2f} ms"
    )
    print(f"  node CPU per exchange, optimization / gossip = {opt.node_us / gossip.node_us:.1f}x")
    for name, run in (("gossip", gossip), ("optimization", opt)):
        assert run.state is not None
        done = max(run.state.activations(), 1)
        counts = {
            key: sum(view.counters.get(key, 0) for view in run.state.nodes.values()) / done
            for key in ("bounced", "retried", "waited", "skipped")
        }
        extra = ", ".join(f"{value:.2f} {key}" for key, value in counts.items())
        print(
            f"    {name}: nodes used {run.node_cores:.2f} cores, {run.io_share:.0%} in zmq I/O "
            f"threads, {run.sleeps:.2f} event-loop sleeps per exchange; per exchange {extra}"
        )
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
    print(f"  load average at the end {os.getloadavg()[0]:.1f} (2 cores)")


if __name__ == "__main__":
    asyncio.run(main())
