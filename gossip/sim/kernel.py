"""The compiled sweep (numba): a group of runs, one activation per loop turn, O(1) each.

Imported only by :func:`gossip.sim.compiled._load` (it imports numba at the top). How it works
and why it gives the NumPy engine's numbers: :mod:`gossip.sim.compiled`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numpy.typing import NDArray

from continuized.gossip.sim.events import _SPARE_SD, CHUNK_T
from continuized.gossip.sim.streams import next_double, pcg_seed, seed_state, standard_exponential

__all__ = ["BATCH", "draw_window", "sweep_runs"]

REBASE = 30.0
"""q's base time moves to an activation's time once ``exp(rate (t - q_base))`` is below e^-30."""

BATCH = max(1, int(CHUNK_T + _SPARE_SD * math.sqrt(CHUNK_T) + 16.0))  # as events.draw_chunk
"""Gaps drawn at a time in a window (the NumPy engine draws the same batches)."""

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@njit(cache=True, nogil=True)
def sweep_runs(  # the kernel takes plain arrays and scalars: numba compiles no objects
    seed: NDArray[np.uint64],
    first_run: int,
    initial: FloatArray,
    end_u: IntArray,
    end_v: IntArray,
    accept: FloatArray,
    alias: IntArray,
    uniform: bool,
    eta: float,
    c: float,
    sweep: FloatArray,
    record: NDArray[np.bool_],
    bounds: IntArray,
    starts: FloatArray,
    mean: FloatArray,
    errors: FloatArray,
) -> int:
    """Simulate runs ``first_run ..`` (one per row of ``errors``); return the activations.

    ``seed`` holds the seed's 32-bit words; ``initial`` is ``(n, d)``; window w covers sweep
    points ``bounds[w, 0] .. bounds[w, 1] - 1`` and starts at ``starts[w]``; run r's errors at
    the recorded points go to ``errors[r]``.
    """
    n, d = initial.shape
    tracks_z = eta != 0.0 or c != 0.0  # plain gossip: z never feeds back, mixing is identity
    rate = -2.0 * eta  # as gossip.model.mixing.decay: (-2 eta) tau
    flat = initial.ravel()
    # Plain gossip keeps x alone. Otherwise a node's state is (s, q) of gossip.sim.compiled:
    # s = x + z and q = (x - z) exp(-rate (t - q_base)), both constant under mixing.
    x = np.empty(0 if tracks_z else n * d, dtype=np.float64)
    s = np.empty(n * d if tracks_z else 0, dtype=np.float64)
    q = np.empty(n * d if tracks_z else 0, dtype=np.float64)
    # A jump's gap x_b - x_a moves s_a by (1/2 + c) gap and x_a - z_a by (1/2 - c) gap.
    to_s = 0.5 + c
    to_q = 0.5 - c
    rng = np.empty(4, dtype=np.uint64)
    times = np.empty(BATCH, dtype=np.float64)
    edges = np.empty(BATCH, dtype=np.int64)
    events = 0
    for r in range(errors.shape[0]):
        pcg_seed(seed_state(seed, first_run + r), rng)
        if tracks_z:
            s[:] = 2.0 * flat  # x = z at the start: s = 2 x, q = 0
            q[:] = 0.0
        else:
            x[:] = flat
        q_base = 0.0
        col = 0
        for w in range(bounds.shape[0]):
            times, edges, in_window = draw_window(
                rng, starts[w], times, edges, accept, alias, uniform
            )
            j = 0
            for i in range(bounds[w, 0], bounds[w, 1]):
                g = sweep[i]
                while j < in_window and times[j] <= g:
                    t = times[j]
                    e = edges[j]
                    a = end_u[e]
                    b = end_v[e]
                    if tracks_z:
                        power = rate * (t - q_base)
                        if power < -REBASE:
                            # Move the base to t, so exp(power) never nears the float range.
                            factor = math.exp(power)
                            # A plain loop: numba's in-place array operator here, though it
                            # runs only at a rebase, made every activation 1.5 times slower.
                            for k in range(q.shape[0]):
                                q[k] *= factor
                            q_base = t
                            power = 0.0
                        decayed = math.exp(power)  # one exp for both ends
                        undo = 1.0 / decayed
                        for k in range(d):
                            ia = a * d + k
                            ib = b * d + k
                            xa = 0.5 * (s[ia] + q[ia] * decayed)
                            xb = 0.5 * (s[ib] + q[ib] * decayed)
                            gap = xb - xa
                            s[ia] += to_s * gap
                            s[ib] -= to_s * gap
                            moved = to_q * gap * undo
                            q[ia] += moved
                            q[ib] -= moved
                    else:
                        for k in range(d):
                            ia = a * d + k
                            ib = b * d + k
                            xa = x[ia]
                            xb = x[ib]
                            x[ia] = xa + 0.5 * (xb - xa)
                            x[ib] = xb + 0.5 * (xa - xb)
                    j += 1
                if record[i]:
                    if tracks_z:
                        errors[r, col] = _error_mixed(s, q, math.exp(rate * (g - q_base)), mean)
                    else:
                        errors[r, col] = _error_plain(x, mean)
                    col += 1
            events += j
    return events


@njit(cache=True, nogil=True)
def draw_window(
    rng: NDArray[np.uint64],
    start: float,
    times: FloatArray,
    edges: IntArray,
    accept: FloatArray,
    alias: IntArray,
    uniform: bool,
) -> tuple[FloatArray, IntArray, int]:
    """Draw a run's activations in the window ``[start, start + CHUNK_T)`` from its stream.

    The gaps come in batches of standard exponentials, each batch's cumulative sum added to the
    last time so far (as :func:`gossip.sim.events.draw_chunk`), until the window is covered;
    then one uniform per activation of the window, turned into an edge by the alias table
    (``accept``, ``alias``; ``uniform``: every edge equally likely). Returns the buffers
    (grown if needed) and how many activations fall in the window: ``times[:count]``,
    ``edges[:count]``.
    """
    end = start + CHUNK_T
    count = 0
    base = start
    while True:
        if count + BATCH > times.shape[0]:
            grown = np.empty(times.shape[0] + BATCH, dtype=np.float64)
            grown[:count] = times[:count]
            times = grown
        acc = 0.0
        for k in range(BATCH):
            acc += standard_exponential(rng)
            times[count + k] = base + acc
        count += BATCH
        base = times[count - 1]
        if base >= end:
            break
    in_window = 0
    while in_window < count and times[in_window] < end:
        in_window += 1
    # All the window's edges now (the uniforms follow the gaps in the stream, as NumPy draws
    # them): the caller's event loop then has no random-number dependency.
    if edges.shape[0] < in_window:
        edges = np.empty(in_window + BATCH, dtype=np.int64)
    n_edges = accept.shape[0]
    for m in range(in_window):
        scaled = next_double(rng) * n_edges
        e = min(int(scaled), n_edges - 1)
        if not uniform and (scaled - e) >= accept[e]:
            e = alias[e]
        edges[m] = e
    return times, edges, in_window


@njit(cache=True, nogil=True)
def _error_plain(x: FloatArray, mean: FloatArray) -> float:
    """``sum_v 1/2 |x_v - mean|^2`` of plain gossip's ``x`` (``n * d``, node after node)."""
    d = mean.shape[0]
    total = 0.0
    for v in range(x.shape[0] // d):
        for k in range(d):
            gap = x[v * d + k] - mean[k]
            total += gap * gap
    return 0.5 * total


@njit(cache=True, nogil=True)
def _error_mixed(s: FloatArray, q: FloatArray, decayed: float, mean: FloatArray) -> float:
    """``sum_v 1/2 |x_v - mean|^2`` with ``x = (s + q decayed) / 2``: every node read at one t."""
    d = mean.shape[0]
    total = 0.0
    for v in range(s.shape[0] // d):
        for k in range(d):
            i = v * d + k
            gap = 0.5 * (s[i] + q[i] * decayed) - mean[k]
            total += gap * gap
    return 0.5 * total
