"""The compiled optimization sweep (numba): a group of runs, one activation per loop turn.

Imported only by :func:`gossip.dual.compiled._load` (it imports numba at the top). How it works
and why it gives the numpy engine's numbers: :mod:`gossip.dual.compiled`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numpy.typing import NDArray

from continuized.gossip.problems.newton_kernel import (
    careful_answer,
    logistic_gradient,
    newton_answer,
)
from continuized.gossip.sim.kernel import draw_window
from continuized.gossip.sim.streams import pcg_seed, seed_state

__all__ = ["sweep_dual_runs"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

STALLED = -1
"""What :func:`sweep_dual_runs` returns when a Newton solve stalled (the caller falls back)."""


@njit(cache=True, nogil=True, inline="always")
def _affine(
    v: int,
    ys: FloatArray,
    outs: FloatArray,
    offset: FloatArray,
    columns: FloatArray,
    identity: bool,
) -> None:
    """``outs[v] = M_v (ys[v] + c_v)``, ``columns[v]`` holding ``M_v^T`` (``identity``:
    ``M_v = I``).

    Column by column (``columns[v, k]`` is column k of ``M_v``, contiguous): each adds a
    multiple of a column, which the compiler vectorises, in the order of a row-by-column dot
    product, so with the same rounding. Whole arrays and a row index, not rows: in numba a row
    is a new array, whose reference counting costs more than an affine answer itself.
    """
    d = ys.shape[1]
    if identity:
        for k in range(d):
            outs[v, k] = ys[v, k] + offset[v, k]
        return
    for i in range(d):
        outs[v, i] = 0.0
    for k in range(d):
        yk = ys[v, k] + offset[v, k]
        for i in range(d):
            outs[v, i] += columns[v, k, i] * yk


@njit(cache=True, nogil=True, inline="always")
def _affine_gradient(
    v: int,
    x: FloatArray,
    outs: FloatArray,
    slot: int,
    offset: FloatArray,
    columns: FloatArray,
    identity: bool,
) -> None:
    """``outs[slot] = H_v x - c_v`` (``offset`` holds c, ``columns[v]`` holds ``H_v^T``;
    ``identity``: ``H_v = I``), column by column as :func:`_affine`."""
    d = x.shape[0]
    if identity:
        for k in range(d):
            outs[slot, k] = x[k] - offset[v, k]
        return
    for i in range(d):
        outs[slot, i] = 0.0
    for k in range(d):
        xk = x[k]
        for i in range(d):
            outs[slot, i] += columns[v, k, i] * xk
    for i in range(d):
        outs[slot, i] -= offset[v, i]


@njit(cache=True, nogil=True)
def _newton(
    v: int,
    ys: FloatArray,
    outs: FloatArray,
    As: FloatArray,
    norms: FloatArray,
    inv_m: FloatArray,
    lam: float,
    tol: float,
    max_steps: int,
    max_halvings: int,
    chols: FloatArray,
    y_prevs: FloatArray,
    slot: int,
    factored: NDArray[np.bool_],
) -> int:
    """``outs[v] = grad f_v^*(ys[v])`` by Newton from ``outs[v]`` (the guess), first corrected
    with ``chols[slot]`` and ``y_prevs[slot]`` if ``factored[slot]`` says they hold a factor
    (kept for the next call). Returns the steps taken, or -1 if even the line search failed."""
    y, out, chol, y_prev = ys[v], outs[v], chols[slot], y_prevs[slot]
    warm = factored[slot]
    start = out.copy()
    steps = newton_answer(
        As[v], norms[v], lam, inv_m[v], tol, y, out, chol, y_prev, warm, max_steps
    )
    if steps < 0:
        # A full step did not shrink the residual (y moved far since the last answer): from
        # that answer again, with a line search, as the numpy engine's solver does.
        warm = False
        out[:] = start
        steps = careful_answer(
            As[v], lam, inv_m[v], tol, y, out, chol, y_prev, max_steps, max_halvings
        )
    # The factor is the last Newton step's (as gossip.problems.compiled_newton keeps it).
    factored[slot] = steps > 0 or (steps == 0 and warm)
    return steps


@njit(cache=True, nogil=True)
def sweep_dual_runs(  # the kernel takes plain arrays and scalars: numba compiles no objects
    seed: NDArray[np.uint64],
    first_run: int,
    end_u: IntArray,
    end_v: IntArray,
    accept: FloatArray,
    alias: IntArray,
    uniform: bool,
    sweep: FloatArray,
    record: NDArray[np.bool_],
    bounds: IntArray,
    starts: FloatArray,
    accelerated: bool,
    primal: bool,
    eta: float,
    gamma: float,
    steps: FloatArray,
    from_z: bool,
    offset: FloatArray,
    columns: FloatArray,
    identity: bool,
    As: FloatArray,
    norms: FloatArray,
    inv_m: FloatArray,
    lam: float,
    tol: float,
    max_steps: int,
    max_halvings: int,
    local: FloatArray,
    x_star: FloatArray,
    alphas: FloatArray,
    errors: FloatArray,
    consensus: FloatArray,
    means: FloatArray,
) -> int:
    """Simulate runs ``first_run ..`` (one per row of ``errors``); return the activations, or
    :data:`STALLED`.

    acd if ``accelerated`` (mixing at rate ``eta``, z's coupling ``gamma``), else cd; edge e's
    step is ``steps[e]``. ``grad f_v^*`` is affine (``offset``; ``columns[v] = M_v^T``;
    ``identity``: every ``M_v = I``) when ``As`` is empty, else logistic Newton from ``local``
    (the local minimisers) on. At recorded point i, run r's ``sum_v |x_v - x*|^2`` goes to
    ``errors[r, col]``, ``sum_v |x_v - mean|^2`` to ``consensus`` and the mean to ``means[r,
    col]``, the estimates x_v taken from z if ``from_z``.

    ``primal``: dgd instead, from ``local``, run r with the step ``alphas[r]``
    (:mod:`gossip.dual.steps`); then ``offset`` and ``columns`` hold ``grad f_v(x) = H_v x -
    c_v`` (``columns[v] = H_v^T``), or ``As`` logistic's rows, and the estimates are the x_v.
    """
    n, d = local.shape
    newton = As.shape[0] > 0
    rate = -2.0 * eta  # as gossip.model.mixing.decay: (-2 eta) tau
    y = np.empty((n, d))
    z = np.empty((n, d))
    last = np.empty(n)
    guess = np.empty((n, d))  # each node's latest answer: its next Newton's start
    # and its last Hessian's factor (dgd solves nothing)
    chol = np.empty((n, d, d) if newton and not primal else (n, 0, 0))
    y_prev = np.empty((n, d))
    factored = np.zeros(n, dtype=np.bool_)  # whether chol[v] holds a factor
    unfactored = np.zeros(1, dtype=np.bool_)  # a measure's Newton keeps no factor
    seen = np.empty((n, d))  # the estimates at a recorded point
    scratch_chol = np.empty((1, d, d))  # a measure's Newton keeps nothing
    scratch_y = np.empty((1, d))
    read = np.empty((n, d))  # the values a recorded point reads
    mean = np.empty(d)
    mid = np.empty(d)  # dgd: the pair's average
    grads = np.empty((2, d))  # dgd: both ends' gradients at it
    zero = np.zeros(d)
    margins = np.empty(As.shape[1])
    sig = np.empty(As.shape[1])
    rng = np.empty(4, dtype=np.uint64)
    times = np.empty(0, dtype=np.float64)
    edges = np.empty(0, dtype=np.int64)
    events = 0
    for r in range(errors.shape[0]):
        pcg_seed(seed_state(seed, first_run + r), rng)
        if primal:
            y[:] = local
        else:
            y[:] = 0.0
        z[:] = 0.0
        last[:] = 0.0
        guess[:] = local
        factored[:] = False
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
                    if primal:
                        for k in range(d):
                            mid[k] = 0.5 * (y[a, k] + y[b, k])
                        for slot in range(2):
                            v = a if slot == 0 else b
                            if not newton:
                                _affine_gradient(v, mid, grads, slot, offset, columns, identity)
                            else:
                                logistic_gradient(
                                    As[v], lam, inv_m[v], mid, zero, margins, sig, grads[slot]
                                )
                        alpha = alphas[r]
                        for k in range(d):
                            y[a, k] = mid[k] - alpha * grads[0, k]
                            y[b, k] = mid[k] - alpha * grads[1, k]
                        j += 1
                        continue
                    if accelerated:
                        for v in (a, b):
                            decayed = math.exp(rate * (t - last[v]))
                            for k in range(d):
                                half_sum = 0.5 * (y[v, k] + z[v, k])
                                half_diff = 0.5 * (y[v, k] - z[v, k]) * decayed
                                y[v, k] = half_sum + half_diff
                                z[v, k] = half_sum - half_diff
                            last[v] = t
                    for v in (a, b):
                        if not newton:
                            _affine(v, y, guess, offset, columns, identity)
                        elif _newton(
                            v, y, guess, As, norms, inv_m, lam, tol, max_steps, max_halvings,
                            chol, y_prev, v, factored,
                        ) < 0:  # fmt: skip
                            return STALLED
                    step = steps[e]
                    for k in range(d):
                        gap = guess[b, k] - guess[a, k]
                        y[a, k] += step * gap
                        y[b, k] -= step * gap
                        if accelerated:
                            z[a, k] += gamma * gap
                            z[b, k] -= gamma * gap
                    j += 1
                if record[i]:
                    mean[:] = 0.0
                    total = 0.0
                    for v in range(n):
                        if accelerated:  # every node mixed to g, the state left as it is
                            decayed = math.exp(rate * (g - last[v]))
                            for k in range(d):
                                half_sum = 0.5 * (y[v, k] + z[v, k])
                                half_diff = 0.5 * (y[v, k] - z[v, k]) * decayed
                                read[v, k] = (
                                    half_sum - half_diff if from_z else half_sum + half_diff
                                )
                        else:
                            read[v] = y[v]
                        if primal:  # dgd's estimates are its values
                            seen[v] = read[v]
                        elif not newton:
                            _affine(v, read, seen, offset, columns, identity)
                        else:
                            seen[v] = guess[v]  # Newton's start
                            if _newton(
                                v, read, seen, As, norms, inv_m, lam, tol, max_steps,
                                max_halvings, scratch_chol, scratch_y, 0, unfactored,
                            ) < 0:  # fmt: skip
                                return STALLED
                            unfactored[0] = False  # that factor was node v's
                        for k in range(d):
                            gap = seen[v, k] - x_star[k]
                            total += gap * gap
                            mean[k] += seen[v, k]
                    mean /= n
                    spread = 0.0
                    for v in range(n):
                        for k in range(d):
                            gap = seen[v, k] - mean[k]
                            spread += gap * gap
                    errors[r, col] = total
                    consensus[r, col] = spread
                    means[r, col] = mean
                    col += 1
            events += j
    return events
