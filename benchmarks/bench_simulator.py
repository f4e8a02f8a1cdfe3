"""Simulated activations per second: the event-driven simulator against a plain numpy baseline.

The baseline is the straightforward vectorised simulation: all runs advance together, one
activation per run per step, and at every step *every* node of every run is mixed up to the
run's new time (O(n) per activation) before the jump. The simulator mixes only the two nodes of
the activated edge (O(1) per activation). Both run on one core here (``workers=1``); the
simulator's default multi-process figure is printed too, and so is the wall time of the full
paper figure (``gossip reproduce gossip-figure``, 1000 runs per curve).

The single-process rates are measured in CPU time of this process (``time.process_time``), so
that other jobs on a shared machine distort the ratio less; the multi-process rate and the
figure are wall time.

Run: ``python benchmarks/bench_simulator.py`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

import numpy as np
from numpy.typing import NDArray

from gossip.jumps import edge_flow
from gossip.mixing import mix
from gossip.params import GossipParams, gossip_params
from gossip.simulator import simulate
from gossip.spectral import graph_quantities
from gossip.topology import Topology, parse_topology
from gossip.values import initial_values


def baseline(
    topo: Topology, params: GossipParams, initial: NDArray[np.float64], runs: int, steps: int
) -> float:
    """Run ``steps`` activations in each of ``runs`` runs, mixing every node at every step.

    Returns the number of activations per second.
    """
    rng = np.random.default_rng(0)
    x = np.tile(initial, (runs, 1))
    z = x.copy()
    now = np.zeros(runs)
    rows = np.arange(runs)
    cdf = np.cumsum(topo.probs)
    started = time.process_time()
    for _ in range(steps):
        gap = rng.exponential(1.0, runs)
        edge = np.minimum(np.searchsorted(cdf, rng.random(runs), side="right"), topo.n_edges - 1)
        x, z = mix(x, z, params.eta, gap[:, None])
        now += gap
        v, w = topo.edges[edge, 0], topo.edges[edge, 1]
        flow = edge_flow(x[rows, v], x[rows, w], params.c)
        x[rows, v] += flow.dx
        x[rows, w] -= flow.dx
        z[rows, v] += flow.dz
        z[rows, w] -= flow.dz
    return runs * steps / (time.process_time() - started)


def event_driven(
    topo: Topology,
    params: GossipParams,
    initial: NDArray[np.float64],
    runs: int,
    t_end: float,
    workers: int | None,
    grid_points: int,
) -> float:
    """Return the simulator's activations per second over ``runs`` runs up to ``t_end``."""
    done = [0]

    def count(events: int) -> None:
        done[0] = events

    grid = np.linspace(0.0, t_end, grid_points)
    clock = time.process_time if workers == 1 else time.perf_counter
    started = clock()
    simulate(topo, params, initial, grid, runs, 1, count, workers=workers)
    return done[0] / (clock() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs (default 1000)")
    parser.add_argument("--t-end", type=float, default=4000.0, help="t per run (default 4000)")
    parser.add_argument("--baseline-steps", type=int, default=400, help="baseline steps")
    parser.add_argument(
        "--grid-points",
        type=int,
        default=21,
        help="simulator's error grid (default 21: one per "
        "200 t, as dense as the paper figure's grid curves)",
    )
    parser.add_argument(
        "--graphs", nargs="+", default=["line:30", "grid:15x15", "grid:32x32"], help="topologies"
    )
    parser.add_argument("--skip-figure", action="store_true", help="skip the full figure")
    args = parser.parse_args()

    print(
        f"runs={args.runs}; simulator to t={args.t_end:g} with {args.grid_points} grid points; "
        f"baseline {args.baseline_steps} steps"
    )
    print(
        f"{'graph':<12} {'algo':<4} {'baseline ev/s':>14} {'simulator ev/s':>15} "
        f"{'ratio':>7} {'sim, all CPUs, wall':>20}"
    )
    for spec in args.graphs:
        topo = parse_topology(spec)
        q = graph_quantities(topo)
        initial = initial_values("onehot", topo.n)
        for name in ("rg", "arg"):
            params = gossip_params(name, q.mu_gossip, q.r_max)
            base = baseline(topo, params, initial, args.runs, args.baseline_steps)
            ours = event_driven(topo, params, initial, args.runs, args.t_end, 1, args.grid_points)
            multi = event_driven(
                topo, params, initial, args.runs, args.t_end, None, args.grid_points
            )
            print(
                f"{spec:<12} {name:<4} {base:>14.3g} {ours:>15.3g} {ours / base:>6.1f}x "
                f"{multi:>20.3g}",
                flush=True,
            )

    if not args.skip_figure:
        with tempfile.TemporaryDirectory() as out:
            started = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "cli.app",
                    "reproduce",
                    "gossip-figure",
                    "--out",
                    out,
                    "--runs",
                    str(args.runs),
                    "--no-progress",
                ],
                check=True,
                capture_output=True,
            )
            wall = time.perf_counter() - started
        print(f"full gossip figure ({args.runs} runs per curve, 6 curves): {wall:.1f} s wall")


if __name__ == "__main__":
    main()
