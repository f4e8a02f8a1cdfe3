"""Exact Monte Carlo simulation of decentralized optimization over randomized gossip.

Runs are independent and run r draws its activations from ``SeedSequence(seed, spawn_key=(r,))``
exactly as :func:`gossip.sim.simulator.simulate` does: for the same seed and graph the two
simulators see the same activations, so with ``f_v = |x - b_v|^2 / 2`` on a graph whose edges
all have the same effective resistance, acd reproduces ARG jump for jump. How a block of runs
is swept: :mod:`gossip.dual.compiled` (numba, the built-in problems, one run after another;
blocks in threads) or :mod:`gossip.dual.engine` (numpy, runs in lock step; blocks in
processes). The two agree (:mod:`gossip.dual.compiled`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from continuized.gossip.dual.compiled import compiled_form, run_dual_block_compiled
from continuized.gossip.dual.engine import BatchProblems, DualBlockSpec, run_dual_block
from continuized.gossip.dual.params import DualParams
from continuized.gossip.dual.result import OptimizationResult, bound_constant
from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.topology import Topology
from continuized.gossip.sim.compiled import ENGINES, resolve_engine
from continuized.gossip.sim.events import windows
from continuized.gossip.sim.sweep import (
    auto_workers,
    run_blocks_in_processes,
    run_blocks_in_threads,
    run_blocks_inline,
)

__all__ = ["ENGINES", "simulate_optimization", "sweep_grid", "uses_compiled"]

FloatArray = NDArray[np.float64]

_MAX_BLOCK = 500  # most runs swept together (bounds the padded rows of a chunk)
_BLOCKS_PER_THREAD = 4  # compiled: blocks per thread, which even out a slowed-down thread


def simulate_optimization(
    topology: Topology,
    problems: BatchProblems,
    params: DualParams,
    t_grid: ArrayLike,
    runs: int,
    seed: int,
    progress: Callable[[int], None] | None = None,
    *,
    workers: int | None = 1,
    estimate: str = "y",
    x_star: FloatArray | None = None,
    engine: str = "auto",
) -> OptimizationResult:
    """Simulate ``runs`` independent runs of one optimizer and record its curves on ``t_grid``.

    Every activation is simulated exactly (Poisson clocks of rate ``P_e`` per edge, rate 1 for
    the network) and costs O(1) whatever the number of nodes.

    Parameters
    ----------
    topology : Topology
        The graph and its edge probabilities; node v holds ``problems.local(v)``.
    problems : ProblemSet
        The nodes' functions (:mod:`gossip.problems`), ``problems.n == topology.n``.
    params : DualParams
        From :func:`gossip.dual.params.dual_params`, for this graph and these functions.
    t_grid : array_like (points,)
        Non-decreasing finite times ``>= 0``, in units of t.
    runs, seed : int
        ``runs >= 1``; run r uses ``SeedSequence(seed, spawn_key=(r,))``, ``seed >= 0``.
    progress : callable, optional
        Called with the number of activations simulated so far (all runs).
    workers : int or None
        Threads of the compiled sweep, else worker processes (spawned; ``problems`` must
        pickle). None: one thread per CPU for a compiled sweep of more than
        :data:`gossip.sim.sweep.THREADED_EVENTS` activations, else 1 (no processes unasked).
        The result does not depend on it.
    estimate : {"y", "z"}
        Which dual variable acd's primal estimates ``grad f_v^*(.)`` are taken from.
    x_star : ndarray (d,), optional
        The minimiser, if already known; default ``problems.x_star()``.
    engine : {"auto", "compiled", "numpy"}
        Which sweep (:data:`ENGINES`; ``auto``: the compiled one where it runs: numba and a
        built-in problem); the two agree to rounding, for logistic to Newton's
        tolerance (:mod:`gossip.dual.compiled`).

    Raises
    ------
    ConfigError
        A size mismatch, a bad grid, runs < 1, seed < 0, workers < 1, an unknown estimate or
        engine, or ``engine="compiled"`` where it cannot run.
    """
    if problems.n != topology.n:
        raise ConfigError(
            f"the problem set has {problems.n} nodes but the graph {topology.spec!r} has "
            f"{topology.n}; give one shard per node"
        )
    if params.steps.size and params.steps.size != topology.n_edges:
        raise ConfigError(
            f"params have {params.steps.size} edge steps; {topology.spec!r} has "
            f"{topology.n_edges} edges"
        )
    grid = check_grid(t_grid)
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ConfigError(f"runs must be an integer >= 1, got {runs!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
    ):
        raise ConfigError(f"workers must be an integer >= 1 or None, got {workers!r}")
    if estimate not in ("y", "z"):
        raise ConfigError(f"estimate must be 'y' or 'z', got {estimate!r}")
    compiled = uses_compiled(engine, params, problems)
    star = np.asarray(problems.x_star() if x_star is None else x_star, dtype=np.float64)
    f_star = float(problems.value(star))
    sweep, record = sweep_grid(grid)
    if workers is None:
        workers = auto_workers(runs * float(grid[-1]), True, runs) if compiled else 1
    split = _BLOCKS_PER_THREAD if compiled and workers > 1 else 1
    count = min(runs, max(split * workers, math.ceil(runs / _MAX_BLOCK)))
    cuts = np.linspace(0, runs, count + 1).round().astype(int)
    specs = [
        DualBlockSpec(
            edges=topology.edges,
            probs=topology.probs,
            problems=problems,
            params=params,
            x_star=star,
            f_star=f_star,
            grid=sweep,
            record=record,
            seed=seed,
            runs=np.arange(a, b, dtype=np.int64),
            estimate=estimate,
        )
        for a, b in itertools.pairwise(cuts)
    ]
    run = run_dual_block_compiled if compiled else run_dual_block
    if workers <= 1 or len(specs) == 1:
        parts = run_blocks_inline(run, specs, progress)
    elif compiled:
        parts = run_blocks_in_threads(run, specs, min(workers, len(specs)), progress)
    else:
        parts = run_blocks_in_processes(run, specs, min(workers, len(specs)), progress)
    return OptimizationResult(
        t_grid=grid,
        errors=np.concatenate([c.errors for c in parts]),
        gaps=np.concatenate([c.gaps for c in parts]),
        consensus=np.concatenate([c.consensus for c in parts]),
        params=params,
        x_star=star,
        f_star=f_star,
        bound_factor=bound_constant(topology, problems, params, star),
        n=topology.n,
        seed=seed,
        estimate=estimate,
        engine="compiled" if compiled else "numpy",
    )


def uses_compiled(engine: str, params: DualParams, problems: BatchProblems) -> bool:
    """Whether ``engine`` resolves to the compiled sweep for this algorithm and problem set.

    Raises
    ------
    ConfigError
        An unknown engine, or ``"compiled"`` where it cannot run.
    """
    if engine in ("auto", "compiled") and compiled_form(params.algorithm, problems) is None:
        if engine == "compiled":
            raise ConfigError(
                f"engine 'compiled' sweeps the built-in problems (quadratic, ridge, "
                f"logistic); this is {params.algorithm.value} on "
                f"{type(problems).__name__}: use engine 'auto' or 'numpy'"
            )
        return False
    return resolve_engine(engine)


def check_grid(t_grid: ArrayLike) -> FloatArray:
    """Return ``t_grid`` as a 1-D float array, or raise ConfigError (unsorted, negative, ...)."""
    try:
        grid = np.array(t_grid, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError("t_grid must be a 1-D array of times") from None
    if grid.ndim != 1 or grid.size == 0:
        raise ConfigError(f"t_grid must be a non-empty 1-D array, got shape {grid.shape}")
    if not np.all(np.isfinite(grid)) or np.any(grid < 0):
        raise ConfigError("t_grid must hold finite times >= 0")
    if np.any(np.diff(grid) < 0):
        raise ConfigError("t_grid must be sorted in non-decreasing order")
    return grid


def sweep_grid(grid: FloatArray) -> tuple[FloatArray, NDArray[np.bool_]]:
    """Add the window ends (multiples of CHUNK_T) to ``grid``; mark the requested points."""
    extra = windows(float(grid[-1]))
    points = np.concatenate((grid, extra))
    record = np.concatenate((np.ones(grid.size, np.bool_), np.zeros(extra.size, np.bool_)))
    order = np.argsort(points, kind="stable")
    return points[order], record[order]
