"""Simulated activations per second: the event-driven simulator against a plain numpy baseline.

The baseline is the straightforward vectorised simulation: all runs advance together, one
activation per run per step, and at every step *every* node of every run is mixed up to the
run's new time (O(n) per activation) before the jump. The simulator mixes only the two nodes of
the activated edge (O(1) per activation), with either engine: the compiled kernel (numba,
``gossip.sim.compiled``) and the vectorised NumPy sweep (``gossip.sim.engine``). All three run on
one core here (``workers=1``) in the same run of this script; the compiled simulator's default
multi-threaded figure is printed too, and so is the time of the full paper figure
(``gossip reproduce gossip-figure``, 1000 runs per curve), wall and CPU.

The single-process rates are measured in CPU time of this process (``time.process_time``), so
that other jobs on a shared machine distort the ratio less; the multi-threaded rate and the
figure's wall time are wall time. Every rate is the best of ``--repeat`` interleaved
measurements (default 3). The first call of the compiled kernel (loading numba's cache,
or compiling on a first ever run) is timed apart and left out of the rates. The figure is timed
twice in fresh processes: cold (an empty numba cache, ``NUMBA_CACHE_DIR``: the kernel compiles)
and warm (the same cache again); the load average is printed with it, since the machine may be
shared.

Run: ``python benchmarks/bench_simulator.py`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import Topology, parse_topology
from continuized.gossip.model.algorithms import GossipParams, gossip_params
from continuized.gossip.model.jumps import edge_flow
from continuized.gossip.model.mixing import mix
from continuized.gossip.model.values import initial_values
from continuized.gossip.sim.compiled import compile_seconds
from continuized.gossip.sim.simulator import simulate


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
    engine: Literal["compiled", "numpy"] = "compiled",
) -> float:
    """Return the simulator's activations per second over ``runs`` runs up to ``t_end``."""
    done = [0]

    def count(events: int) -> None:
        done[0] = events

    grid = np.linspace(0.0, t_end, grid_points)
    clock = time.process_time if workers == 1 else time.perf_counter
    started = clock()
    result = simulate(topo, params, initial, grid, runs, 1, count, workers=workers, engine=engine)
    assert result.engine == engine
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
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="interleaved repeats of every measurement, the best kept (default 3)",
    )
    parser.add_argument("--skip-figure", action="store_true", help="skip the full figure")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")

    print(
        f"runs={args.runs}; simulator to t={args.t_end:g} with {args.grid_points} grid points; "
        f"baseline {args.baseline_steps} steps; best of {args.repeat} interleaved repeats"
    )
    # The kernel's first call: numba's on-disk cache loaded (or the kernel compiled, first time).
    warm = parse_topology("line:3")
    began = time.perf_counter()
    simulate(warm, gossip_params("arg", 0.1, 2.0), np.eye(3)[0], [0.0, 1.0], 1, 0, workers=1)
    print(
        f"compiled kernel, first call: {time.perf_counter() - began:.2f} s wall "
        f"(kernel {compile_seconds() or 0.0:.2f} s)"
    )
    print(
        f"{'graph':<12} {'algo':<4} {'baseline ev/s':>14} {'numpy eng ev/s':>15} "
        f"{'compiled ev/s':>14} {'x baseline':>10} {'x numpy eng':>11} {'all CPUs ev/s':>14} "
        f"{'x baseline':>10}"
    )
    for spec in args.graphs:
        topo = parse_topology(spec)
        q = graph_quantities(topo)
        initial = initial_values("onehot", topo.n)
        for name in ("rg", "arg"):
            params = gossip_params(name, q.mu_gossip, q.r_max)
            base = vec = ours = multi = 0.0
            # Interleaved repeats, the best of each kept (as timeit does): a shared machine
            # only ever slows a measurement down, and it does so by bursts.
            for _ in range(args.repeat):
                base = max(base, baseline(topo, params, initial, args.runs, args.baseline_steps))
                vec = max(
                    vec,
                    event_driven(
                        topo, params, initial, args.runs, args.t_end, 1, args.grid_points, "numpy"
                    ),
                )
                ours = max(
                    ours,
                    event_driven(topo, params, initial, args.runs, args.t_end, 1, args.grid_points),
                )
                multi = max(
                    multi,
                    event_driven(
                        topo, params, initial, args.runs, args.t_end, None, args.grid_points
                    ),
                )
            print(
                f"{spec:<12} {name:<4} {base:>14.3g} {vec:>15.3g} {ours:>14.3g} "
                f"{ours / base:>9.1f}x {ours / vec:>10.1f}x {multi:>14.3g} {multi / base:>9.1f}x",
                flush=True,
            )

    if not args.skip_figure:
        with tempfile.TemporaryDirectory() as cache:
            for label in ("cold", "warm"):
                figure(args.runs, label, cache)


def figure(runs: int, label: str, cache: str) -> None:
    """Time ``gossip reproduce gossip-figure`` in a new process, numba's cache in ``cache``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        command = [
            sys.executable,
            "-m",
            "continuized.cli.app",
            "reproduce",
            "gossip-figure",
            "--out",
            out,
        ]
        command += ["--runs", str(runs), "--no-progress"]
        subprocess.run(command, check=True, capture_output=True, env=env)
        wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"full gossip figure, {label} ({runs} runs per curve, 6 curves): {wall:.1f} s wall, "
        f"{cpu:.1f} s CPU (all threads); load average {load}",
        flush=True,
    )


if __name__ == "__main__":
    main()
