"""One shard's logistic ``grad f^*`` by Newton, compiled (numba): the live node's hot path.

Imported only by :func:`gossip.problems.compiled_newton.compiled_solver` (it imports numba at
the top).
It is :class:`gossip.problems.logistic._LocalNewton` as one compiled call, with the same steps
(a residual or a step's bound within rounding of its threshold may take one step more or
less: 622 against 628 steps over a walk of 300 answers in the tests):

* the first step is the first-order correction ``x0 + C^-1 (y - y0)`` from the Cholesky factor
  ``C`` kept from the previous answer (for ``y0``), and the residual must then go below
  ``|y - y0| + tol``;
* then full Newton steps, each with a fresh Hessian and its Cholesky factor, until the residual
  ``|grad f(x) - y|`` is ``<= tol`` or a step ``p`` is certified to leave a residual
  ``<= tol / 2`` (``sum_i norms_i (a_i^T p)^2``, the bound of the third derivative);
* a step that does not shrink the residual, or a Hessian that is not positive definite, stops
  it: the caller then solves with the safeguarded batched solver.

Why compiled: a live node calls ``grad f^*`` twice per exchange, and the numpy path makes about
forty small numpy calls per answer. With 30 node processes on two cores every wake-up runs with
cold caches, and those calls then cost 97 us per answer (measured in a live cluster, line:30
at 1500/s), against 40-50 us replayed warm in one process. Here an answer is one call.

The factor is computed in place (lower triangle of ``chol``; the upper one is scratch), so an
answer allocates only its scratch vectors. :func:`logistic_gradient` is the same residual at
``y = 0``: the primal baseline dgd's compiled sweep (:mod:`gossip.dual.kernel`) steps along it.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = ["careful_answer", "logistic_gradient", "newton_answer"]

FloatArray = NDArray[np.float64]


@njit(cache=True)
def _cholesky(a: FloatArray) -> bool:
    """Factor ``a`` in place, ``a = L L^T`` with ``L`` in the lower triangle; False if not PD."""
    d = a.shape[0]
    for j in range(d):
        s = a[j, j]
        for k in range(j):
            s -= a[j, k] * a[j, k]
        if not s > 0.0:  # also catches nan
            return False
        ljj = math.sqrt(s)
        a[j, j] = ljj
        for i in range(j + 1, d):
            s = a[i, j]
            for k in range(j):
                s -= a[i, k] * a[j, k]
            a[i, j] = s / ljj
    return True


@njit(cache=True)
def _cho_solve(chol: FloatArray, b: FloatArray, out: FloatArray) -> None:
    """``out = (L L^T)^-1 b`` with ``L`` the lower triangle of ``chol``."""
    d = b.shape[0]
    for i in range(d):  # L w = b
        s = b[i]
        for k in range(i):
            s -= chol[i, k] * out[k]
        out[i] = s / chol[i, i]
    for i in range(d - 1, -1, -1):  # L^T out = w
        s = out[i]
        for k in range(i + 1, d):
            s -= chol[k, i] * out[k]
        out[i] = s / chol[i, i]


@njit(cache=True)
def _margins(As: FloatArray, x: FloatArray, t: FloatArray) -> None:
    """``t = As x``."""
    m, d = As.shape
    for i in range(m):
        s = 0.0
        for j in range(d):
            s += As[i, j] * x[j]
        t[i] = s


@njit(cache=True)
def _residual(
    As: FloatArray,
    lam: float,
    inv_m: float,
    y: FloatArray,
    x: FloatArray,
    t: FloatArray,
    sig: FloatArray,
    g: FloatArray,
) -> float:
    """``g = grad f(x) - y`` from the margins ``t``, with ``sig_i = sigma(-t_i)``; ``|g|``."""
    m, d = As.shape
    for i in range(m):
        sig[i] = 1.0 / (1.0 + math.exp(t[i]))  # sigma(-t_i) = -phi'(t_i)
    g[:] = 0.0
    for i in range(m):  # row by row: the rows are contiguous
        w = sig[i]
        for j in range(d):
            g[j] += As[i, j] * w
    res2 = 0.0
    for j in range(d):
        g[j] = lam * x[j] - y[j] - g[j] * inv_m
        res2 += g[j] * g[j]
    return math.sqrt(res2)


@njit(cache=True)
def logistic_gradient(
    As: FloatArray,
    lam: float,
    inv_m: float,
    x: FloatArray,
    zero: FloatArray,
    t: FloatArray,
    sig: FloatArray,
    g: FloatArray,
) -> None:
    """``g = grad f(x)``, ``zero`` a zero vector of x's size; ``t`` and ``sig`` (one entry per
    row) are scratch."""
    _margins(As, x, t)
    _residual(As, lam, inv_m, zero, x, t, sig, g)


@njit(cache=True)
def _factor_hessian(
    As: FloatArray, lam: float, inv_m: float, sig: FloatArray, chol: FloatArray
) -> bool:
    """Factor the Hessian at the margins whose ``sigma(-t_i)`` are ``sig`` (overwritten with
    the row weights) into ``chol``; False if it is not positive definite."""
    m, d = As.shape
    for a in range(d):
        for b in range(a + 1):
            chol[a, b] = 0.0
        chol[a, a] = lam
    for i in range(m):  # sum_i w_i a_i a_i^T, lower triangle, row by row: contiguous
        w = sig[i] * (1.0 - sig[i]) * inv_m
        for a in range(d):
            wa = w * As[i, a]
            for b in range(a + 1):
                chol[a, b] += wa * As[i, b]
    return _cholesky(chol)


@njit(cache=True)
def newton_answer(  # plain arrays and scalars: numba compiles no objects
    As: FloatArray,
    norms: FloatArray,
    lam: float,
    inv_m: float,
    tol: float,
    y: FloatArray,
    x: FloatArray,
    chol: FloatArray,
    y_prev: FloatArray,
    warm: bool,
    max_steps: int,
) -> int:
    """Solve ``grad f(x) = y`` in place from ``x`` (the previous answer); Newton steps taken.

    ``As`` (m, d): row i is ``s_i a_i``; ``norms`` (m,): ``|a_i| PHI3 / (2 m)``. ``chol`` and
    ``y_prev`` hold the previous answer's Hessian factor and ``y`` (used if ``warm``) and are
    updated for the next call. Returns -1 if Newton stalled (``x`` and ``chol`` are then
    meaningless and the next call must not be ``warm``).
    """
    m, d = As.shape
    p = np.empty(d)
    g = np.empty(d)
    t = np.empty(m)
    sig = np.empty(m)
    prev = np.inf
    if warm:
        dy = y - y_prev
        _cho_solve(chol, dy, p)
        for j in range(d):
            x[j] += p[j]
        prev = math.sqrt(np.dot(dy, dy)) + tol
    _margins(As, x, t)
    for step in range(max_steps + 1):
        res = _residual(As, lam, inv_m, y, x, t, sig, g)
        if res <= tol:
            break
        if not res < prev or step == max_steps:  # also catches nan
            return -1
        prev = res
        if not _factor_hessian(As, lam, inv_m, sig, chol):
            return -1
        _cho_solve(chol, g, p)
        bound = 0.0
        for i in range(m):
            q = 0.0
            for j in range(d):
                q += As[i, j] * p[j]
            t[i] -= q
            bound += norms[i] * q * q
        for j in range(d):
            x[j] -= p[j]
        if bound <= 0.5 * tol:  # certified: x - p is returned without evaluating it
            step += 1
            break
    y_prev[:] = y
    return step


@njit(cache=True)
def _objective(
    As: FloatArray, lam: float, inv_m: float, y: FloatArray, x: FloatArray, t: FloatArray
) -> float:
    """``phi(x) = 1/m sum_i log(1 + exp(-t_i)) + lam/2 |x|^2 - <x, y>``, with ``t = As x``:
    strongly convex, minimised where ``grad f(x) = y``."""
    loss = 0.0
    for i in range(t.shape[0]):
        ti = t[i]
        loss += math.log1p(math.exp(-ti)) if ti >= 0.0 else -ti + math.log1p(math.exp(ti))
    reg = 0.0
    lin = 0.0
    for j in range(x.shape[0]):
        reg += x[j] * x[j]
        lin += x[j] * y[j]
    return loss * inv_m + 0.5 * lam * reg - lin


@njit(cache=True)
def careful_answer(
    As: FloatArray,
    lam: float,
    inv_m: float,
    tol: float,
    y: FloatArray,
    x: FloatArray,
    chol: FloatArray,
    y_prev: FloatArray,
    max_steps: int,
    max_halvings: int,
) -> int:
    """Solve ``grad f(x) = y`` in place from ``x`` by Newton with a line search; steps taken.

    The safeguarded solver of :func:`gossip.problems.logistic.newton_conjugate`, compiled, for
    where :func:`newton_answer`'s full steps stall (the compiled optimization sweep): each
    Newton step ``p`` is scaled by the first of 1, 1/2, 1/4, ... that decreases ``phi`` by
    Armijo's rule (with the same slack for rounding), so it converges from any start. Leaves
    ``chol`` and ``y_prev`` as :func:`newton_answer` does; -1 if ``max_steps`` or
    ``max_halvings`` ran out, or a Hessian was not positive definite.
    """
    m, d = As.shape
    t = np.empty(m)
    trial = np.empty(m)
    sig = np.empty(m)
    g = np.empty(d)
    p = np.empty(d)
    cand = np.empty(d)
    _margins(As, x, t)
    for step in range(max_steps + 1):
        if _residual(As, lam, inv_m, y, x, t, sig, g) <= tol:
            y_prev[:] = y
            return step
        if step == max_steps or not _factor_hessian(As, lam, inv_m, sig, chol):
            return -1
        _cho_solve(chol, g, p)
        phi = _objective(As, lam, inv_m, y, x, t)
        slope = 0.0
        for j in range(d):
            slope += g[j] * p[j]
        alpha = 1.0
        accepted = False
        for _ in range(max_halvings):
            for j in range(d):
                cand[j] = x[j] - alpha * p[j]
            _margins(As, cand, trial)
            bound = phi - 1e-4 * alpha * slope + 1e-15 * (1.0 + abs(phi))
            if _objective(As, lam, inv_m, y, cand, trial) <= bound:
                accepted = True
                break
            alpha *= 0.5
        if not accepted:
            return -1
        x[:] = cand
        t[:] = trial
    return -1
