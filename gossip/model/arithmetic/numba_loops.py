"""The numba backend of :mod:`gossip.model.arithmetic`: each formula one loop, one pass over memory.

Imported only by :func:`gossip.model.arithmetic.for_size` for a model large enough to pay for
numba (its import is 60 MB of a process's memory and half a second). Each loop computes,
element by element, the same floating-point operations as the NumPy blocks
(:mod:`gossip.model.arithmetic.numpy_blocks`), with no fast-math (no reassociation, no fused
multiply-add), so the two agree to the bit; the tests check it. The one exception is
:func:`all_finite`, a check whose answer no order of its additions can change. Each public
function is the API's (:class:`~gossip.model.arithmetic.Backend`), whose docstrings give the
formulas; most are the compiled loops themselves, with no Python in between.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

from continuized.gossip.model.arithmetic.floats import (
    F64,
    FLOAT32_MAX,
    LARGEST,
    Floats,
    stored_below,
)

__all__ = [
    "add_flow",
    "add_halves",
    "add_sums",
    "all_finite",
    "book",
    "flow",
    "half_parts",
    "one_pass",
    "pending_state",
    "state",
    "state_flow",
    "state_x",
]


@njit(cache=True, nogil=True)
def state(sum_a: F64, sum_d: F64, factor: float, x: Floats, z: Floats) -> None:  # pragma: no cover
    """``x = a + f d``, ``z = a - f d``."""
    for i in range(sum_a.size):
        fd = sum_d[i] * factor
        x[i] = sum_a[i] + fd
        z[i] = sum_a[i] - fd


@njit(cache=True, nogil=True)
def state_x(sum_a: F64, sum_d: F64, factor: float, x: Floats) -> None:  # pragma: no cover
    """``x = a + f d``."""
    for i in range(sum_a.size):
        x[i] = sum_a[i] + sum_d[i] * factor


@njit(cache=True, nogil=True, inline="always")
def _put_flow(
    gap: float, c: float, step: float, dx: Floats, dz: Floats, i: int, below: float
) -> bool:  # pragma: no cover
    """Store ``dz[i] = c gap`` and ``dx[i] = step gap``; whether both are below ``below`` in
    magnitude (NaN compares false), so finite once stored
    (:func:`~gossip.model.arithmetic.floats.stored_below`)."""
    vz = gap * c
    vx = gap * step
    dz[i] = vz
    dx[i] = vx
    return (abs(vz) < below) & (abs(vx) < below)


@njit(cache=True, nogil=True)
def _flow(
    x_v: Floats, x_w: Floats, c: float, step: float, dx: Floats, dz: Floats, below: float
) -> bool:  # pragma: no cover
    """``dx = step (x_w - x_v)``, ``dz = c (x_w - x_v)``, the gap in float64; whether every
    value is below ``below`` in magnitude, so finite once stored (:func:`_put_flow`)."""
    ok: Any = True  # a bool for numba, whatever mypy makes of numpy's comparisons
    for i in range(x_v.size):
        gap = np.float64(x_w[i]) - np.float64(x_v[i])
        # A boolean and, not a branch: the loop stays vectorised.
        ok = ok & _put_flow(gap, c, step, dx, dz, i, below)
    return bool(ok)


def flow(x_v: Floats, x_w: Floats, c: float, step: float, dx: Floats, dz: Floats) -> bool:
    """``dx = step (x_w - x_v)``, ``dz = c (x_w - x_v)``; whether all are finite, checked as
    each value is stored: no second read."""
    return bool(_flow(x_v, x_w, c, step, dx, dz, stored_below(dx.dtype)))


@njit(cache=True, nogil=True)
def _state_flow(
    sum_a: F64,
    sum_d: F64,
    factor: float,
    x_v: Floats,
    c: float,
    step: float,
    dx: Floats,
    dz: Floats,
    below: float,
) -> bool:  # pragma: no cover
    """:func:`_flow` from ``x_v`` to ``x_w = a + f d`` (:func:`state_x`), ``x_w`` never stored;
    whether every value is below ``below``, as :func:`_flow` says."""
    ok: Any = True
    for i in range(sum_a.size):
        gap = (sum_a[i] + sum_d[i] * factor) - np.float64(x_v[i])
        ok = ok & _put_flow(gap, c, step, dx, dz, i, below)
    return bool(ok)


def state_flow(
    sums: tuple[F64, F64], factor: float, x_v: Floats, c: float, step: float, dx: Floats, dz: Floats
) -> bool:
    """:func:`flow` from ``x_v`` to ``x_w = a + f d``, ``x_w`` never stored; checked as
    :func:`flow` is."""
    sum_a, sum_d = sums
    return bool(_state_flow(sum_a, sum_d, factor, x_v, c, step, dx, dz, stored_below(dx.dtype)))


@njit(cache=True, nogil=True)
def half_parts(
    dx: Floats, dz: Floats, k_a: float, k_d: float, a: F64, d: F64
) -> bool:  # pragma: no cover
    """``a = k_a (dx + dz)``, ``d = k_d (dx - dz)``; whether all are finite."""
    # An and over comparisons, not a branch per element: the loop stays vectorised.
    # (NaN compares false, infinities are above the largest float.)
    finite: Any = 1  # an int for numba, whatever mypy makes of numpy's comparisons
    for i in range(dx.size):
        x, z = np.float64(dx[i]), np.float64(dz[i])
        ai = (x + z) * k_a
        di = (x - z) * k_d
        a[i] = ai
        d[i] = di
        finite &= (abs(ai) <= LARGEST) & (abs(di) <= LARGEST)
    return bool(finite == 1)


@njit(cache=True, nogil=True)
def add_flow(
    a: F64, d: F64, row_a: F64, sum_a: F64, row_d: F64, sum_d: F64
) -> None:  # pragma: no cover
    """``row_a += a``, ``sum_a += a``, ``row_d += d``, ``sum_d += d``."""
    for i in range(a.size):
        row_a[i] += a[i]
        sum_a[i] += a[i]
        row_d[i] += d[i]
        sum_d[i] += d[i]


@njit(cache=True, nogil=True)
def _bounded(dx: Floats, dz: Floats, limit: float) -> bool:  # pragma: no cover
    """Whether every ``|dx|`` and ``|dz|`` is at most ``limit`` (NaN is not)."""
    ok: Any = 1
    for i in range(dx.size):
        ok &= (abs(np.float64(dx[i])) <= limit) & (abs(np.float64(dz[i])) <= limit)
    return bool(ok == 1)


@njit(cache=True, nogil=True, fastmath={"reassoc"})
def all_finite(x: Floats) -> bool:  # pragma: no cover
    """Whether every value of ``x`` is finite: ``v * 0`` is 0 for a finite ``v`` and nan for an
    inf or a nan, so the sum is 0 exactly when all are finite, in whatever order it is added
    (which lets the loop run on the vector units: 2.5x NumPy's sum of float32 here)."""
    total = 0.0
    for i in range(x.size):
        total += x[i] * 0.0
    return total == 0.0


def one_pass(dx: Floats, dz: Floats, k_a: float, k_d: float, finite: bool = False) -> bool:
    """Whether every value is far below overflow, so that no half-part can overflow: one read
    of ``dx`` and ``dz``, none for float32 arrays the caller knows are ``finite``."""
    if not math.isfinite(k_d):
        return False
    # |x|, |z| <= limit keeps x + z, x - z and their products by k_a, k_d finite.
    limit = LARGEST / (4.0 * max(1.0, abs(k_a), abs(k_d)))
    # Every finite float32 is within the limit: finite is enough (a check that runs at the
    # speed of memory; the bounds' per-value compare does not).
    within = dx.dtype == dz.dtype == np.float32 and limit >= FLOAT32_MAX
    if within and (finite or (all_finite(dx) and all_finite(dz))):
        return True
    return bool(_bounded(dx, dz, limit))


def book(
    dx: Floats,
    dz: Floats,
    k_a: float,
    k_d: float,
    rows: tuple[F64, F64, F64, F64],
    scratch: tuple[F64, F64],
) -> bool:
    """A flow :func:`one_pass` takes is added by :func:`add_halves`, its half-parts never
    written; any other by :func:`half_parts` into ``scratch`` and :func:`add_flow`, which
    changes nothing if a half-part is not finite (then False)."""
    if one_pass(dx, dz, k_a, k_d):
        add_halves(dx, dz, k_a, k_d, *rows)
        return True
    a, d = scratch
    if not half_parts(dx, dz, k_a, k_d, a, d):
        return False
    add_flow(a, d, *rows)
    return True


@njit(cache=True, nogil=True)
def add_halves(
    dx: Floats,
    dz: Floats,
    k_a: float,
    k_d: float,
    row_a: F64,
    sum_a: F64,
    row_d: F64,
    sum_d: F64,
) -> None:  # pragma: no cover
    """:func:`half_parts` then :func:`add_flow`, without writing ``a`` and ``d``."""
    for i in range(dx.size):
        x, z = np.float64(dx[i]), np.float64(dz[i])
        ai = (x + z) * k_a
        di = (x - z) * k_d
        row_a[i] += ai
        sum_a[i] += ai
        row_d[i] += di
        sum_d[i] += di


# A booking split in two (:meth:`gossip.model.parameters.ParameterLedger.settle`): the running
# sums when the ledger must change them, the edge's row when the node is idle; and a state read
# while a booking waits (:func:`pending_state`). Each computes ``a`` and ``d`` as
# :func:`add_halves` does, so every path adds, and reads, the same numbers.


@njit(cache=True, nogil=True)
def pending_state(
    dx: Floats,
    dz: Floats,
    k_a: float,
    k_d: float,
    sum_a: F64,
    sum_d: F64,
    factor: float,
    x: Floats,
    z: Floats,
) -> None:  # pragma: no cover
    """:func:`state` of the sums with a flow added, ``a = sum_a + k_a (dx + dz)`` and
    ``d = sum_d + k_d (dx - dz)`` (what :func:`add_halves` will store), the sums left as they
    are: a read of them, not a write."""
    for i in range(dx.size):
        fx, fz = np.float64(dx[i]), np.float64(dz[i])
        a = sum_a[i] + (fx + fz) * k_a
        d = sum_d[i] + (fx - fz) * k_d
        fd = d * factor
        x[i] = a + fd
        z[i] = a - fd


@njit(cache=True, nogil=True)
def add_sums(
    dx: Floats, dz: Floats, k_a: float, k_d: float, sum_a: F64, sum_d: F64
) -> None:  # pragma: no cover
    """``sum_a += k_a (dx + dz)``, ``sum_d += k_d (dx - dz)``: the running sums, or a row."""
    for i in range(dx.size):
        fx, fz = np.float64(dx[i]), np.float64(dz[i])
        sum_a[i] += (fx + fz) * k_a
        sum_d[i] += (fx - fz) * k_d
