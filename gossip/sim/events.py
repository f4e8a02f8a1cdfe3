"""Activation times and edges of independent runs, laid out for a lock-step sweep over runs.

Theory of operation
-------------------
In one run, edge e fires at the times of a Poisson process of rate ``P_e``; equivalently the
network fires at rate 1 and each activation picks edge e with probability ``P_e``. So a run draws
the gaps between activations, independent exponentials of mean 1 (in t), and for each activation
an independent edge from ``P``. This is exact, not a time step.

Every run has its own generator, derived from ``SeedSequence(seed, spawn_key=(run,))``, and draws
its activations window by window, the windows being the fixed intervals
``[k CHUNK_T, (k + 1) CHUNK_T)``; a window's process starts afresh from the window's start, which
is exact because the exponential distribution is memoryless. So a run's trajectory depends only
on ``(seed, run)``: not on the time grid, on how many runs there are, on how they are split into
blocks, or on how many worker processes sweep them.

The simulator sweeps a block of runs in lock step: row ``k`` of a :class:`Chunk` holds one
activation per run. Runs are at different times, and a grid interval holds a different number of
activations in each run, so the rows of interval i are padded up to the largest count with
*idle* activations on a dummy edge (index ``n_edges``) that joins a dummy node to itself: its flow
is exactly zero, so padding changes nothing, and every row is the same branch-free work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "CHUNK_T",
    "Chunk",
    "EdgeSampler",
    "chunk_bounds",
    "draw_chunk",
    "run_generator",
    "windows",
]

CHUNK_T = 1024.0
"""Target span of a chunk, in units of t (about that many activations per run)."""

_SPARE_SD = 8.0  # gaps drawn per window: CHUNK_T plus this many standard deviations (and 16)


def run_generator(seed: int, run: int) -> np.random.Generator:
    """Return the generator of run ``run``: the run-th child of ``SeedSequence(seed)``."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(run,)))


def windows(t_end: float) -> NDArray[np.float64]:
    """Return the multiples of CHUNK_T in ``(0, t_end)``: the window ends a sweep must visit."""
    return np.arange(1, math.ceil(t_end / CHUNK_T), dtype=np.float64) * CHUNK_T


def chunk_bounds(sweep: NDArray[np.float64]) -> list[tuple[int, int, float]]:
    """Group sweep points by window: ``[(i0, i1, window_start), ...]``.

    Window k is ``(k CHUNK_T, (k + 1) CHUNK_T]`` (t = 0 belongs to window 0). ``sweep`` must
    contain every window end below its last point (see :func:`windows`), so that every grid
    interval lies inside one window.
    """
    index = np.maximum(np.ceil(sweep / CHUNK_T) - 1, 0).astype(np.int64)
    bounds: list[tuple[int, int, float]] = []
    i0 = 0
    for i in range(1, len(sweep) + 1):
        if i == len(sweep) or index[i] != index[i0]:
            bounds.append((i0, i, float(index[i0]) * CHUNK_T))
            i0 = i
    return bounds


@dataclass(frozen=True, eq=False)
class EdgeSampler:
    """Draw edges from ``P`` in O(1) per draw: Walker's alias table, one uniform per draw.

    ``u`` in [0, 1) picks the column ``i = floor(u E)``; its fractional part ``f`` keeps edge i if
    ``f < accept[i]`` and takes ``alias[i]`` otherwise. Each column carries total mass 1/E, so
    edge e is drawn with probability exactly ``P_e`` (up to rounding). A binary search of the
    cumulative probabilities would cost O(log E) cache misses per draw instead.
    """

    accept: NDArray[np.float64]
    alias: NDArray[np.int64]
    uniform: bool = False

    @classmethod
    def from_probs(cls, probs: NDArray[np.float64]) -> EdgeSampler:
        """Build the table of the distribution ``probs`` (positive, summing to 1)."""
        n = len(probs)
        scaled = np.asarray(probs, dtype=np.float64) * n
        accept = np.ones(n, dtype=np.float64)
        alias = np.arange(n, dtype=np.int64)
        uniform = bool(np.allclose(probs, 1.0 / n, rtol=1e-12, atol=0.0))
        if uniform:  # every column is its own edge; skip the O(n) Python loop below
            return cls(accept, alias, uniform)
        small = [i for i in range(n) if scaled[i] < 1.0]
        large = [i for i in range(n) if scaled[i] >= 1.0]
        while small and large:
            s, big = small.pop(), large.pop()
            accept[s], alias[s] = scaled[s], big
            scaled[big] -= 1.0 - scaled[s]
            (small if scaled[big] < 1.0 else large).append(big)
        # Whatever is left has mass 1 up to rounding and keeps its own column.
        return cls(accept, alias, uniform)

    def sample(self, u: NDArray[np.float64]) -> NDArray[np.int64]:
        """Return the edges drawn by the uniforms ``u`` (values in [0, 1))."""
        n = len(self.accept)
        scaled = u * n
        column = scaled.astype(np.int64)
        np.minimum(column, n - 1, out=column)  # u * n can round up to n
        if self.uniform:  # every column is its own edge: skip the alias step
            return column
        keep = (scaled - column) < self.accept[column]
        return np.where(keep, column, self.alias[column])


@dataclass(frozen=True, eq=False)
class Chunk:
    """Padded activations of a block of runs over consecutive grid intervals.

    Attributes
    ----------
    times : ndarray (rows, runs), float64
        Activation times (t); idle rows hold their interval's end time.
    edges : ndarray (rows, runs), int64
        Edge indices; ``n_edges`` marks an idle activation.
    row_stops : ndarray (intervals,), int64
        After row ``row_stops[i] - 1`` every run has passed the end of interval i.
    events : int
        Number of real (not idle) activations in the chunk, over all runs.
    """

    times: NDArray[np.float64]
    edges: NDArray[np.int64]
    row_stops: NDArray[np.int64]
    events: int


def draw_chunk(
    gens: list[np.random.Generator],
    start: float,
    ends: NDArray[np.float64],
    sampler: EdgeSampler,
) -> Chunk:
    """Draw every run's activations in the window from ``start`` and lay them out in padded rows.

    The whole window ``[start, start + CHUNK_T)`` is drawn, whatever part of it the grid covers,
    so that a run's activations do not depend on the grid; those after ``ends[-1]`` are dropped.

    Parameters
    ----------
    gens : list of Generator
        One generator per run of the block (see :func:`run_generator`).
    start : float
        Start of the window, a multiple of CHUNK_T.
    ends : ndarray (intervals,)
        Ends of the grid intervals covered by the chunk, increasing, ``ends[0] >= start``.
    sampler : EdgeSampler
        The edge distribution ``P``.
    """
    n_runs, n_int, n_edges = len(gens), len(ends), len(sampler.accept)
    end = start + CHUNK_T
    # Enough gaps to cover the window but in about 1e-15 of the cases (Poisson tail); the
    # while loop below tops them up when that happens.
    batch = max(1, int(CHUNK_T + _SPARE_SD * math.sqrt(CHUNK_T) + 16.0))
    times_l: list[NDArray[np.float64]] = []
    edge_draws: list[NDArray[np.float64]] = []
    # bounds[r, i]: activations of run r up to the end of interval i - 1 (bounds[r, 0] = 0).
    bounds = np.zeros((n_runs, n_int + 1), dtype=np.int64)
    for r, gen in enumerate(gens):
        times = start + np.cumsum(gen.standard_exponential(batch))
        while times[-1] < end:
            times = np.append(times, times[-1] + np.cumsum(gen.standard_exponential(batch)))
        in_window = int(np.searchsorted(times, end, side="left"))
        # Draw the window's edges whatever the horizon, so the stream does not depend on it.
        u = gen.random(in_window)
        bounds[r, 1:] = np.searchsorted(times[:in_window], ends, side="right")
        kept = int(bounds[r, -1])
        times_l.append(times[:kept])
        edge_draws.append(u[:kept])
    times = np.concatenate(times_l)
    edges = sampler.sample(np.concatenate(edge_draws))
    per_group = np.diff(bounds, axis=1)  # (runs, intervals): activations of run r in interval i
    counts = bounds[:, -1]
    widest = per_group.max(axis=0)
    row_stops = np.cumsum(widest)
    # Activations are in (run, time) order, so each (run, interval) group is contiguous; the
    # j-th activation of a group goes to row row_start[interval] + j.
    flat_groups = per_group.ravel()
    group_start = np.cumsum(flat_groups) - flat_groups
    offset = np.tile(row_stops - widest, n_runs) - group_start
    rows = np.repeat(offset, flat_groups) + np.arange(len(times))
    run_of = np.repeat(np.arange(n_runs), counts)
    n_rows = int(row_stops[-1]) if n_int else 0
    padded_t = np.repeat(ends, widest)[:, None].repeat(n_runs, axis=1)
    padded_e = np.full((n_rows, n_runs), n_edges, dtype=np.int64)
    padded_t[rows, run_of] = times
    padded_e[rows, run_of] = edges
    return Chunk(padded_t, padded_e, row_stops.astype(np.int64), int(counts.sum()))
