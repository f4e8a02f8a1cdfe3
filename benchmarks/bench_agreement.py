"""How often the live-against-simulator check fails a perfect cluster, and how often a slow one.

Run with ``python benchmarks/bench_agreement.py`` (about two minutes on two cores for the
default, the optimization run of ``tests/coordinator/test_live_optimization.py``), or with
``--problem none --graph grid:4x4 --algorithm arg --t-end 300`` for gossip.

:mod:`coordinator.figures.agreement` judges one live curve among the simulator's own runs at a
chosen ``alpha``. A curve the model itself produced should then fail about ``alpha`` to ``2 alpha``
of the time; how volatile the model's curves are decides where in that range, and a test that
runs in CI needs the figure. This measures it: one band (``--band-runs``) and one null set
(``--null-runs``) as the live checks draw them, then ``--own`` more runs of the model (another
seed) judged like a live run at each ``--alphas`` value: the false alarms. Then the power:
``--slow-runs`` runs of a cluster at ``--slow`` times the rate (it reaches at t what the model
reaches at ``slow * t``), judged the same way.

Every curve is sampled at ``--points`` times from ``--t-min`` to ``--t-end``, as a live run's
reports are.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from continuized.coordinator.figures.agreement import Band
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import Topology, parse_topology

Simulate = Callable[[NDArray[np.float64], int, int], NDArray[np.float64]]
"""``(t, runs, seed) -> errors (runs, len(t))``."""


def gossip_runs(topology: Topology, algorithm: str) -> Simulate:
    """The exact gossip simulator from one-hot values, as the live gossip tests start."""
    from continuized.gossip.model.algorithms import gossip_params
    from continuized.gossip.sim.simulator import simulate

    quantities = graph_quantities(topology)
    params = gossip_params(algorithm, quantities.mu_gossip, quantities.r_max)
    initial = np.eye(topology.n)[0]

    def run(t: NDArray[np.float64], runs: int, seed: int) -> NDArray[np.float64]:
        return simulate(topology, params, initial, t, runs, seed).errors

    return run


def optimization_runs(
    topology: Topology, problem: str, data: str, split: str, workers: int
) -> Simulate:
    """The optimization simulator for the problem the live cluster would load."""
    from continuized.coordinator.figures.optimization import prepare_task
    from continuized.gossip.dual.simulate import simulate_optimization

    task = prepare_task(problem, data, split, topology, graph_quantities(topology))

    def run(t: NDArray[np.float64], runs: int, seed: int) -> NDArray[np.float64]:
        return simulate_optimization(
            topology, task.problems, task.dual, t, runs, seed, workers=workers
        ).errors

    return run


def _interval(failed: int, total: int) -> str:
    """The share, and a 95% Wilson interval: a few hundred runs pin a 1% rate only so far."""
    if total == 0:
        return "n/a"
    share = failed / total
    z = 1.96
    centre = (share + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total))
    half /= 1 + z * z / total
    return f"{share:6.2%} [{max(0.0, centre - half):.2%}, {centre + half:.2%}]"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="grid:3x3")
    parser.add_argument(
        "--problem", default="logistic:0.1", help="an optimization problem, or none for gossip"
    )
    parser.add_argument("--data", default="breast-cancer")
    parser.add_argument("--split", default="label:1")
    parser.add_argument("--algorithm", default="arg", help="gossip's (with --problem none)")
    parser.add_argument("--t-min", type=float, default=20.0)
    parser.add_argument("--t-end", type=float, default=600.0)
    parser.add_argument("--points", type=int, default=110)
    parser.add_argument("--band-runs", type=int, default=60)
    parser.add_argument("--null-runs", type=int, default=1000)
    parser.add_argument("--own", type=int, default=400, help="model runs judged: false alarms")
    parser.add_argument("--slow", type=float, default=0.5, help="the slow cluster's rate factor")
    parser.add_argument("--slow-runs", type=int, default=40)
    parser.add_argument("--alphas", default="0.01,0.005,0.002")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        alphas = [float(a) for a in args.alphas.split(",")]
    except ValueError:
        parser.error(f"--alphas must be numbers in (0, 1), comma-separated, got {args.alphas!r}")
    if not all(0.0 < a < 1.0 for a in alphas):
        parser.error(f"--alphas must be numbers in (0, 1), got {args.alphas!r}")
    if not 0.0 < args.t_min < args.t_end:
        parser.error(f"need 0 < --t-min < --t-end, got {args.t_min!r} and {args.t_end!r}")
    if not 0.0 < args.slow <= 1.0:
        parser.error(f"--slow must be in (0, 1], got {args.slow!r}")
    for name in ("points", "band_runs", "null_runs", "own", "slow_runs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    smallest = 1.0 / (args.null_runs + 1)
    if min(alphas) < smallest:
        print(
            f"note: with {args.null_runs} null runs no p-value is below {smallest:.4f}: "
            f"alpha {min(alphas)} can never fail a run"
        )

    topology = parse_topology(args.graph)
    if args.problem == "none":
        simulate = gossip_runs(topology, args.algorithm)
        what = f"gossip {args.algorithm}"
    else:
        simulate = optimization_runs(topology, args.problem, args.data, args.split, args.workers)
        what = f"{args.problem} on {args.data} ({args.split})"
    t = np.linspace(args.t_min, args.t_end, args.points)
    began = time.perf_counter()
    band = Band.from_runs(t, simulate(t, args.band_runs, 1), null=simulate(t, args.null_runs, 2))
    own = simulate(t, args.own, 12345)
    slow = simulate(args.slow * t, args.slow_runs, 777)
    took = time.perf_counter() - began
    print(
        f"{args.graph}, {what}: t {args.t_min:g}..{args.t_end:g} at {args.points} points; band "
        f"of {args.band_runs} runs, null {args.null_runs}; simulated in {took:.0f} s"
    )
    own_verdicts = [band.judge(run) for run in own]
    slow_verdicts = [band.judge(run) for run in slow]
    for alpha in alphas:
        false_alarms = sum(not v.typical(alpha) for v in own_verdicts)
        caught = sum(not v.typical(alpha) for v in slow_verdicts)
        print(
            f"  alpha {alpha:<6g} fails {_interval(false_alarms, len(own))} of {len(own)} runs "
            f"of the model; {_interval(caught, len(slow))} of {len(slow)} at {args.slow:g}x "
            "the rate"
        )


if __name__ == "__main__":
    main()
