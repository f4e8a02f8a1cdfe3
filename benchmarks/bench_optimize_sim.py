"""The optimization simulator's two engines, same runs, same run of this script: activations/s.

For each problem (quadratic, ridge, logistic on breast-cancer, iid shards) and algorithm (acd,
cd, and dgd at a quarter of ``1/L``: at ``1/L`` the quadratics' dgd does not move), the same
runs (same seed, graph and grid) are swept by the numpy engine (runs in lock step,
``gossip.dual.engine``) and by the compiled one (one run after another,
``gossip.dual.compiled``), both in this process on one core (``workers=1``), timed in CPU time
of the process, best of ``--repeat`` interleaved measurements. The first compiled call (numba
compiling, or loading its cache) is timed apart. The curves of the two engines are compared
too: the largest gap between their distances ``sqrt(sum_v |x_v - x*|^2)``, relative to the
starting distance.

Then the band of a live optimization run, as ``bench_cluster.py --problem`` and the dashboard
judge it (``coordinator.figures.agreement.optimization_agreement``: 60 runs, two workers): wall time
with each engine.

Run: ``python benchmarks/bench_optimize_sim.py`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from continuized.gossip.datasets import load_shards
from continuized.gossip.dual.experiment import algorithm_params
from continuized.gossip.dual.params import dual_params
from continuized.gossip.dual.simulate import simulate_optimization
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.problems import make_problem_set


def _problems(spec: str, n: int) -> Any:
    if spec == "quadratic":
        return make_problem_set(spec, None, n=n)  # the paper's one-hot: node 0 holds 1
    return make_problem_set(spec, load_shards("breast-cancer", "iid:0", n)[0])


def _cpu(call: Any) -> tuple[float, Any]:
    began = time.process_time()
    result = call()
    return time.process_time() - began, result


def compare(graph: str, spec: str, algorithm: str, runs: int, t_end: float, repeat: int) -> None:
    """Print both engines' activations per CPU second on the same runs, and their ratio."""
    topo = parse_topology(graph)
    problems = _problems(spec, topo.n)
    q = graph_quantities(topo)
    params = algorithm_params(algorithm, q, problems)
    if algorithm == "dgd":
        step = 0.25 / float(problems.L)
        params = dual_params("dgd", q.mu_gossip, q.r_eff, problems.mu, problems.L, alpha=step)
    grid = np.linspace(0.0, t_end, 20)

    def run(engine: str) -> Any:
        return simulate_optimization(topo, problems, params, grid, runs, 0, engine=engine)

    first, _ = _cpu(lambda: run("compiled"))
    best = {"compiled": np.inf, "numpy": np.inf}
    results: dict[str, Any] = {}
    for _ in range(repeat):
        for engine in best:
            spent, results[engine] = _cpu(lambda engine=engine: run(engine))
            best[engine] = min(best[engine], spent)
    fast, slow = results["compiled"], results["numpy"]
    scale = float(np.sqrt(slow.errors[:, 0]).max())
    gap = float(np.abs(np.sqrt(fast.errors) - np.sqrt(slow.errors)).max()) / scale
    events = runs * t_end
    print(
        f"  {spec:>14} {algorithm:>3} {runs:4d} runs x t {t_end:>7,.0f}: numpy "
        f"{events / best['numpy']:>11,.0f}/s, compiled {events / best['compiled']:>11,.0f}/s "
        f"= {best['numpy'] / best['compiled']:5.1f}x (first call {first:.2f} s); curves apart "
        f"by {gap:.1e} of the starting distance",
        flush=True,
    )


def band_wall(graph: str, runs: int, t_end: float) -> None:
    """Wall time of a live logistic run's band (60 runs, two workers) with each engine."""
    topo = parse_topology(graph)
    problems = _problems("logistic:0.01", topo.n)
    params = algorithm_params("acd", graph_quantities(topo), problems)
    grid = np.linspace(0.02 * t_end, t_end, 150)
    for engine in ("compiled", "numpy"):
        began = time.perf_counter()
        simulate_optimization(topo, problems, params, grid, runs, 0, workers=2, engine=engine)
        print(
            f"  band of a live logistic:0.01 run on {graph} ({runs} runs to t = {t_end:,.0f}, "
            f"two workers), {engine}: {time.perf_counter() - began:.1f} s wall",
            flush=True,
        )


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the options and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="line:30")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--runs", default="10,200", help="run counts, comma-separated")
    parser.add_argument("--t-end", type=float, default=3000.0)
    parser.add_argument("--algorithms", default="acd,cd,dgd", help="comma-separated")
    parser.add_argument("--band-t", type=float, default=60000.0, help="t of the band (0: skip)")
    parser.add_argument("--band-runs", type=int, default=60)
    args = parser.parse_args(argv)
    print(
        f"{args.graph}, load average {os.getloadavg()[0]:.2f}; CPU time of one process, best "
        f"of {args.repeat}:",
        flush=True,
    )
    for spec in ("quadratic", "ridge:0.1", "logistic:0.01"):
        for algorithm in args.algorithms.split(","):
            for runs in (int(r) for r in args.runs.split(",")):
                # Logistic's numpy sweep costs tens of us per activation (a Newton solve per
                # answer; dgd's gradient is cheap): fewer of them.
                newton = spec.startswith("logistic") and algorithm != "dgd"
                t_end = args.t_end / (10 if newton and runs > 20 else 1)
                compare(args.graph, spec, algorithm, runs, t_end, args.repeat)
    if args.band_t > 0:
        band_wall(args.graph, args.band_runs, args.band_t)


if __name__ == "__main__":
    main()
