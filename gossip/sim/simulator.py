"""Exact, event-driven Monte Carlo simulation of the continuized gossip process.

>>> import numpy as np
>>> from continuized.gossip.model.algorithms import gossip_params
>>> from continuized.gossip.graph.spectral import graph_quantities
>>> from continuized.gossip.graph.topology import parse_topology
>>> from continuized.gossip.model.values import initial_values
>>> topo = parse_topology("line:10")
>>> q = graph_quantities(topo)
>>> params = gossip_params("arg", q.mu_gossip, q.r_max)
>>> result = simulate(topo, params, initial_values("onehot", 10), np.array([0.0, 50.0]), 20, 1)
>>> result.errors.shape, round(float(result.errors[0, 0]), 12)
((20, 2), 0.45)

Runs are independent; run r uses the r-th child of ``SeedSequence(seed)``, so results depend
only on the seed (not on the number of worker processes), and the first k runs of a larger
simulation are the k runs of a smaller one. How it works: :mod:`gossip.sim.engine`.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.topology import Topology
from continuized.gossip.model.algorithms import GossipParams
from continuized.gossip.sim.compiled import ENGINES, resolve_engine, run_block_compiled
from continuized.gossip.sim.engine import BlockSpec, run_block
from continuized.gossip.sim.events import windows
from continuized.gossip.sim.statistics import ErrorsOverRuns
from continuized.gossip.sim.sweep import (
    auto_workers,
    run_blocks_in_processes,
    run_blocks_in_threads,
    run_blocks_inline,
)

__all__ = ["ENGINES", "MAX_BLOCK", "SimulationResult", "simulate"]


FloatArray = NDArray[np.float64]

MAX_BLOCK = 1000
"""Most runs swept together in one block (bounds the memory of a chunk's padded rows)."""

_BLOCK_VALUES = 4_000_000  # most node values (runs x nodes x d) held per block: 32 MB per array

_BLOCKS_PER_THREAD = 4  # blocks per compiled-kernel thread (see simulate)


@dataclass(frozen=True, eq=False)
class SimulationResult(ErrorsOverRuns):
    """Errors of independent runs on a time grid.

    Attributes
    ----------
    t_grid : ndarray (points,)
        The times (t) at which the error was measured.
    errors : ndarray (runs, points)
        ``sum_v 1/2 |x_v(t) - mean|^2`` for each run at each grid time.
    params : GossipParams
        The algorithm and its parameters.
    initial_error : float
        The error at t = 0 (``e0`` in the theorem's bound).
    seed : int
        The seed the runs were derived from.
    engine : str
        ``"compiled"`` (numba kernel) or ``"numpy"``: which engine ran; the results agree.
    """

    t_grid: FloatArray
    errors: FloatArray
    params: GossipParams
    initial_error: float
    seed: int
    engine: str = "numpy"

    def bound(self) -> FloatArray:
        """The theorem's bound on the mean error: ``bound_factor * e0 * exp(-theta t)``."""
        p = self.params
        return p.bound_factor * self.initial_error * np.exp(-p.theta * self.t_grid)


def simulate(
    topology: Topology,
    params: GossipParams,
    initial: ArrayLike,
    t_grid: ArrayLike,
    runs: int,
    seed: int,
    progress: Callable[[int], None] | None = None,
    *,
    workers: int | None = None,
    engine: Literal["auto", "compiled", "numpy"] = "auto",
) -> SimulationResult:
    """Simulate ``runs`` independent runs of gossip and record their error on ``t_grid``.

    Every activation is simulated exactly: a Poisson process of rate ``P_e`` per edge (rate 1
    for the network), the jump of ``params`` at each activation and exact mixing in between
    (nothing is discretised in time). An activation costs O(1) whatever the number of nodes.

    Parameters
    ----------
    topology : Topology
        The graph and its edge probabilities.
    params : GossipParams
        ``eta`` and ``c`` of RG or ARG (see :func:`gossip.model.algorithms.gossip_params`).
    initial : array_like (n,) or (n, d)
        Initial values; ``x`` and ``z`` both start there.
    t_grid : array_like (points,)
        Non-decreasing, finite times ``>= 0`` (units of t: one activation per unit on average).
    runs : int
        Number of independent runs, ``>= 1``.
    seed : int
        Seed ``>= 0``; run r uses ``SeedSequence(seed, spawn_key=(r,))``.
    progress : callable, optional
        Called with the number of activations simulated so far (all runs), from the calling
        thread, every few thousand activations per run.
    workers : int, optional
        Workers: threads of the compiled kernel, else processes; default: one per CPU for large
        jobs, none (in the calling thread) for small ones. The result does not depend on it.
        Worker processes are started with ``spawn``, which imports the calling script: as with
        any use of multiprocessing, a script that calls ``simulate`` at the top level must
        guard it with ``if __name__ == "__main__":`` (or pass ``workers=1``).
    engine : {"auto", "compiled", "numpy"}
        ``compiled`` is the numba kernel (:mod:`gossip.sim.compiled`), ``numpy`` the vectorised
        sweep (:mod:`gossip.sim.engine`); both simulate the same runs from the same streams and
        agree to rounding. ``auto`` (default) takes ``compiled`` when numba imports, unless the
        environment variable ``GOSSIP_SIM_ENGINE=numpy`` says otherwise.

    Returns
    -------
    SimulationResult
        Errors of shape ``(runs, len(t_grid))``.

    Raises
    ------
    ConfigError
        Bad shapes, non-finite values, an unsorted or negative grid, runs < 1, seed < 0, an
        unknown engine, or ``engine="compiled"`` without numba.
    """
    values = _check_initial(initial, topology.n)
    grid = _check_grid(t_grid)
    if isinstance(runs, bool) or not isinstance(runs, int | np.integer) or runs < 1:
        raise ConfigError(f"runs must be an integer >= 1, got {runs!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ConfigError(f"workers must be an integer >= 1, got {workers!r}")
    runs, seed = int(runs), int(seed)
    compiled = resolve_engine(engine)

    sweep, record = _sweep_grid(grid)
    # Threads take blocks from one queue: several per thread even out a thread that is slowed
    # down (a shared machine), at no cost since the kernel spends nothing per block.
    split = _BLOCKS_PER_THREAD if compiled else 1
    blocks = _blocks(runs, workers, max(1, _BLOCK_VALUES // values.size), split)
    specs = [
        BlockSpec(
            n=topology.n,
            edges=topology.edges,
            probs=topology.probs,
            initial=values,
            eta=float(params.eta),
            c=float(params.c),
            grid=sweep,
            record=record,
            seed=seed,
            first_run=first,
            n_runs=count,
        )
        for first, count in blocks
    ]
    expected_events = runs * float(sweep[-1]) if len(sweep) else 0.0
    if workers is None:
        workers = auto_workers(expected_events, compiled, len(specs))
    workers = min(workers, len(specs))
    if workers <= 1:
        parts = run_blocks_inline(run_block_compiled if compiled else run_block, specs, progress)
    elif compiled:
        parts = run_blocks_in_threads(run_block_compiled, specs, workers, progress)
    else:
        parts = run_blocks_in_processes(run_block, specs, workers, progress)
    errors = np.concatenate(parts, axis=0) if grid.size else np.empty((runs, 0))
    gap = values - values.mean(axis=0)
    return SimulationResult(
        t_grid=grid,
        errors=errors,
        params=params,
        initial_error=float(0.5 * np.sum(gap * gap)),
        seed=seed,
        engine="compiled" if compiled else "numpy",
    )


def _check_initial(initial: ArrayLike, n: int) -> FloatArray:
    try:
        values = np.array(initial, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(
            "initial values must be an array of numbers of shape (n,) or (n, d)"
        ) from None
    if values.ndim not in (1, 2) or values.shape[0] != n or values.size == 0:
        raise ConfigError(
            f"initial values have shape {values.shape}; expected ({n},) or ({n}, d) with d >= 1"
        )
    if not np.all(np.isfinite(values)):
        raise ConfigError("initial values must all be finite")
    return values


def _check_grid(t_grid: ArrayLike) -> FloatArray:
    try:
        grid = np.array(t_grid, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError("t_grid must be a 1-D array of times") from None
    if grid.ndim != 1:
        raise ConfigError(f"t_grid must be 1-D, got shape {grid.shape}")
    if not np.all(np.isfinite(grid)) or np.any(grid < 0):
        raise ConfigError("t_grid must hold finite times >= 0")
    if np.any(np.diff(grid) < 0):
        raise ConfigError("t_grid must be sorted in non-decreasing order")
    return grid


def _sweep_grid(grid: FloatArray) -> tuple[FloatArray, NDArray[np.bool_]]:
    """Add the window ends (multiples of CHUNK_T) to ``grid``; mark the requested points."""
    if grid.size == 0:
        return grid, np.zeros(0, dtype=np.bool_)
    extra = windows(float(grid[-1]))
    points = np.concatenate((grid, extra))
    record = np.concatenate((np.ones(grid.size, np.bool_), np.zeros(extra.size, np.bool_)))
    order = np.argsort(points, kind="stable")
    return points[order], record[order]


def _blocks(runs: int, workers: int | None, most: int, split: int = 1) -> list[tuple[int, int]]:
    """Split runs into near-equal contiguous blocks: ``split`` per worker (or CPU) at least, and
    of at most ``min(most, MAX_BLOCK)`` runs each."""
    wanted = split * (workers if workers is not None else (os.cpu_count() or 1))
    count = max(wanted, math.ceil(runs / min(most, MAX_BLOCK)))
    count = min(count, runs)
    edges = np.linspace(0, runs, count + 1).round().astype(int)
    return [(int(a), int(b - a)) for a, b in itertools.pairwise(edges)]
