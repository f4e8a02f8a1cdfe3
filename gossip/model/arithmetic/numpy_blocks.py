"""The NumPy backend of :mod:`gossip.model.arithmetic`: each formula block by block.

Written as whole-array NumPy expressions, every formula is several passes over arrays of
megabytes, each reading them from memory again. Here each runs on blocks of :data:`BLOCK`
elements: a block's temporaries stay in the CPU's cache, so the large arrays are read once and
written once per elementary operation. The backend of models below
:data:`~gossip.model.arithmetic.COMPILED_MIN_DIM` parameters, and of every model where numba
does not import; each function is the API's (:class:`~gossip.model.arithmetic.Backend`), whose
docstrings give the formulas, computed element for element as written there.
"""

from __future__ import annotations

import math

import numpy as np

from continuized.gossip.model.arithmetic.floats import F64, Floats

__all__ = [
    "BLOCK",
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

BLOCK = 16384
"""Elements per block: 128 kB of float64 per array, so a block's half-dozen arrays fit in a
core's L2 cache (512 kB or more on the machines the project runs on)."""


def _blocks(dim: int) -> range:
    return range(0, dim, BLOCK)


def state(sum_a: F64, sum_d: F64, factor: float, x: Floats, z: Floats) -> None:
    """``x = a + f d`` and ``z = a - f d``.

    Examples
    --------
    >>> x, z = np.empty(2), np.empty(2)
    >>> state(np.array([1.0, 2.0]), np.array([0.5, 0.0]), 0.5, x, z)
    >>> x.tolist(), z.tolist()
    ([1.25, 2.0], [0.75, 2.0])
    """
    _state(sum_a, sum_d, factor, x, z)


def state_x(sum_a: F64, sum_d: F64, factor: float, x: Floats) -> None:
    """``x = a + f d``."""
    _state(sum_a, sum_d, factor, x, None)


def _state(sum_a: F64, sum_d: F64, factor: float, x: Floats, z: Floats | None) -> None:
    dim = sum_a.size
    scratch = np.empty(min(dim, BLOCK))
    for i in _blocks(dim):
        j = min(i + BLOCK, dim)
        fd = np.multiply(sum_d[i:j], factor, out=scratch[: j - i])
        np.add(sum_a[i:j], fd, out=x[i:j])
        if z is not None:
            np.subtract(sum_a[i:j], fd, out=z[i:j])


def flow(x_v: Floats, x_w: Floats, c: float, step: float, dx: Floats, dz: Floats) -> bool:
    """``dx = step (x_w - x_v)``, ``dz = c (x_w - x_v)``; whether all are finite.

    Examples
    --------
    >>> dx, dz = np.empty(1), np.empty(1)
    >>> flow(np.array([1.0]), np.array([0.0]), 2.0, 0.5, dx, dz), dx.tolist(), dz.tolist()
    (True, [-0.5], [-2.0])
    """
    dim = x_v.size
    gap = np.empty(min(dim, BLOCK))
    with np.errstate(over="ignore", invalid="ignore"):  # what overflows is refused below
        for i in _blocks(dim):
            j = min(i + BLOCK, dim)
            _flow_block(x_v[i:j], x_w[i:j], c, step, dx[i:j], dz[i:j], gap[: j - i])
    return _flow_finite(c, step, dx, dz)


def _flow_block(
    x_v: Floats, x_w: Floats, c: float, step: float, dx: Floats, dz: Floats, gap: F64
) -> None:
    """:func:`flow` on one block, its gap in ``gap`` (which may be ``x_w`` itself)."""
    g = np.subtract(x_w, x_v, out=gap, dtype=np.float64)
    np.multiply(g, c, out=dz)
    np.multiply(g, step, out=dx)


def state_flow(
    sums: tuple[F64, F64], factor: float, x_v: Floats, c: float, step: float, dx: Floats, dz: Floats
) -> bool:
    """:func:`flow` from ``x_v`` to ``x_w = a + f d``, ``x_w`` never stored.

    Examples
    --------
    >>> dx, dz = np.empty(1), np.empty(1)
    >>> state_flow((np.array([1.0]), np.array([2.0])), 0.5, np.array([0.0]), 2.0, 0.5, dx, dz)
    True
    >>> dx.tolist(), dz.tolist()
    ([1.0], [4.0])
    """
    sum_a, sum_d = sums
    dim = sum_a.size
    x_w = np.empty(min(dim, BLOCK))
    with np.errstate(over="ignore", invalid="ignore"):  # what overflows is refused below
        for i in _blocks(dim):
            j = min(i + BLOCK, dim)
            w = x_w[: j - i]
            _state(sum_a[i:j], sum_d[i:j], factor, w, None)
            _flow_block(x_v[i:j], w, c, step, dx[i:j], dz[i:j], w)
    return _flow_finite(c, step, dx, dz)


def all_finite(x: Floats) -> bool:
    """Whether every value of the 1-d array ``x`` is finite, in one read.

    Examples
    --------
    >>> all_finite(np.array([1.0, -2.0])), all_finite(np.array([1.0, np.inf]))
    (True, False)
    """
    # One reduction instead of isfinite's temporary: an inf or a nan makes the sum inf or nan;
    # a sum that overflows from finite values only looks closer.
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.add.reduce(x))
    return total - total == 0.0 or bool(np.isfinite(x).all())


def _flow_finite(c: float, step: float, dx: Floats, dz: Floats) -> bool:
    """Whether every value of a flow ``dx = step g``, ``dz = c g`` is finite, from one read of
    the one of the two with the larger factor: its values are finite only if the gap is, and
    then the other's are too (each is the same gap times a factor no larger, rounded to the
    same dtype)."""
    return all_finite(dz if abs(c) >= abs(step) else dx)


def half_parts(dx: Floats, dz: Floats, k_a: float, k_d: float, a: F64, d: F64) -> bool:
    """``a = k_a (dx + dz)``, ``d = k_d (dx - dz)``; whether all are finite.

    Examples
    --------
    >>> a, d = np.empty(1), np.empty(1)
    >>> half_parts(np.array([3.0]), np.array([1.0]), 0.5, -0.5, a, d), a.tolist(), d.tolist()
    (True, [2.0], [-1.0])
    """
    dim = dx.size
    total = 0.0
    with np.errstate(over="ignore", invalid="ignore"):  # what overflows is refused below
        for i in _blocks(dim):
            j = min(i + BLOCK, dim)
            ab, db = a[i:j], d[i:j]
            np.add(dx[i:j], dz[i:j], out=ab, dtype=np.float64)
            np.multiply(ab, k_a, out=ab)
            np.subtract(dx[i:j], dz[i:j], out=db, dtype=np.float64)
            np.multiply(db, k_d, out=db)
            # One sum per block for the check: any inf or nan makes it inf or nan.
            total += float(np.add.reduce(ab)) + float(np.add.reduce(db))
    return math.isfinite(total) or bool(np.isfinite(a).all() and np.isfinite(d).all())


def _halves(dx: Floats, dz: Floats, k_a: float, k_d: float, a: F64, d: F64) -> None:
    """:func:`half_parts` on one block, unchecked (the one-pass booking's own, off the
    exchange's path: :func:`half_parts` keeps its operations inline)."""
    np.add(dx, dz, out=a, dtype=np.float64)
    np.multiply(a, k_a, out=a)
    np.subtract(dx, dz, out=d, dtype=np.float64)
    np.multiply(d, k_d, out=d)


def add_flow(a: F64, d: F64, row_a: F64, sum_a: F64, row_d: F64, sum_d: F64) -> None:
    """``row_a += a``, ``sum_a += a``, ``row_d += d``, ``sum_d += d``.

    Examples
    --------
    >>> r, s = np.zeros(1), np.ones(1)
    >>> add_flow(np.array([2.0]), np.array([3.0]), r, s, r, s)
    >>> r.tolist(), s.tolist()
    ([5.0], [6.0])
    """
    dim = a.size
    for i in _blocks(dim):
        j = min(i + BLOCK, dim)
        ab, db = a[i:j], d[i:j]
        np.add(row_a[i:j], ab, out=row_a[i:j])
        np.add(sum_a[i:j], ab, out=sum_a[i:j])
        np.add(row_d[i:j], db, out=row_d[i:j])
        np.add(sum_d[i:j], db, out=sum_d[i:j])


def one_pass(dx: Floats, dz: Floats, k_a: float, k_d: float, finite: bool = False) -> bool:
    """False: the NumPy blocks have no one-pass booking, so every flow is booked at once.

    Examples
    --------
    >>> one_pass(np.ones(2), np.ones(2), 0.5, 0.5)
    False
    """
    return False


def book(
    dx: Floats,
    dz: Floats,
    k_a: float,
    k_d: float,
    rows: tuple[F64, F64, F64, F64],
    scratch: tuple[F64, F64],
) -> bool:
    """:func:`half_parts` into ``scratch``, then :func:`add_flow` into ``rows``; False, with
    nothing changed, if a half-part is not finite.

    Examples
    --------
    >>> rows = tuple(np.zeros(1) for _ in range(4))
    >>> book(np.array([3.0]), np.array([1.0]), 0.5, 0.5, rows, (np.empty(1), np.empty(1)))
    True
    >>> [r.tolist() for r in rows]
    [[2.0], [2.0], [1.0], [1.0]]
    """
    a, d = scratch
    if not half_parts(dx, dz, k_a, k_d, a, d):
        return False
    add_flow(a, d, *rows)
    return True


def add_halves(
    dx: Floats,
    dz: Floats,
    k_a: float,
    k_d: float,
    row_a: F64,
    sum_a: F64,
    row_d: F64,
    sum_d: F64,
) -> None:
    """:func:`half_parts` then :func:`add_flow`, unchecked, ``a`` and ``d`` in a block's
    scratch."""
    dim = dx.size
    scratch_a, scratch_d = np.empty(min(dim, BLOCK)), np.empty(min(dim, BLOCK))
    for i in _blocks(dim):
        j = min(i + BLOCK, dim)
        ab, db = scratch_a[: j - i], scratch_d[: j - i]
        _halves(dx[i:j], dz[i:j], k_a, k_d, ab, db)
        np.add(row_a[i:j], ab, out=row_a[i:j])
        np.add(sum_a[i:j], ab, out=sum_a[i:j])
        np.add(row_d[i:j], db, out=row_d[i:j])
        np.add(sum_d[i:j], db, out=sum_d[i:j])


def add_sums(dx: Floats, dz: Floats, k_a: float, k_d: float, sum_a: F64, sum_d: F64) -> None:
    """``sum_a += k_a (dx + dz)``, ``sum_d += k_d (dx - dz)``, unchecked."""
    dim = dx.size
    scratch_a, scratch_d = np.empty(min(dim, BLOCK)), np.empty(min(dim, BLOCK))
    for i in _blocks(dim):
        j = min(i + BLOCK, dim)
        ab, db = scratch_a[: j - i], scratch_d[: j - i]
        _halves(dx[i:j], dz[i:j], k_a, k_d, ab, db)
        np.add(sum_a[i:j], ab, out=sum_a[i:j])
        np.add(sum_d[i:j], db, out=sum_d[i:j])


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
) -> None:
    """:func:`state` of ``a = sum_a + k_a (dx + dz)`` and ``d = sum_d + k_d (dx - dz)``, the
    sums only read."""
    dim = dx.size
    scratch_a, scratch_d = np.empty(min(dim, BLOCK)), np.empty(min(dim, BLOCK))
    for i in _blocks(dim):
        j = min(i + BLOCK, dim)
        ab, db = scratch_a[: j - i], scratch_d[: j - i]
        _halves(dx[i:j], dz[i:j], k_a, k_d, ab, db)
        np.add(sum_a[i:j], ab, out=ab)
        np.add(sum_d[i:j], db, out=db)
        fd = np.multiply(db, factor, out=db)
        np.add(ab, fd, out=x[i:j])
        np.subtract(ab, fd, out=z[i:j])
