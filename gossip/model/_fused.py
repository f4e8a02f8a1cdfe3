"""A model's exchange arithmetic, block by block: each operation reads its arrays once.

An exchange of a model's parameters is a few vector formulas (the state ``x = a + f d``, the
flow ``dx = s (x_w - x_v)``, its booking into a ledger row and the running sum). Written as
whole-array NumPy expressions, every formula is several passes over arrays of megabytes, and
each pass reads them from memory again: about 30 passes per exchange at a million
parameters, which cost more than moving the bytes over the wire. The functions here compute
the same formulas, element for element the same floating-point operations, on blocks of
:data:`BLOCK` elements: a block's temporaries stay in the CPU's cache, so the large arrays are
read once and written once per operation.

That still leaves one pass per elementary operation. For a model of :data:`COMPILED_MIN_DIM`
parameters or more, each function runs instead as one numba loop (:mod:`gossip.model._loops`),
one pass over memory for the whole formula, when numba imports: at a million parameters an
exchange's arithmetic then costs a few passes instead of about 30. Smaller models keep the
NumPy blocks: numba's import alone is 60 MB of a process's memory, more than the whole of a
small model's node, which must fit a Raspberry Pi.

Outputs may be float32 (the dtype a float32 model's frames carry): each block is computed in
float64 and rounded once when it is stored.

The rule these functions keep: **the arithmetic per element is that of the plain formula in
each docstring**, which the tests check against the plain NumPy expression.
"""

from __future__ import annotations

import math
import sys
from types import ModuleType

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "BLOCK",
    "COMPILED_MIN_DIM",
    "add_flow",
    "all_finite",
    "book",
    "compiled",
    "flow",
    "half_parts",
    "one_pass",
    "state",
    "state_flow",
    "stored_below",
]

BLOCK = 16384
"""Elements per block: 128 kB of float64 per array, so a block's half-dozen arrays fit in a
core's L2 cache (512 kB or more on the machines the project runs on)."""

COMPILED_MIN_DIM = 1 << 17
"""Arrays of at least this many elements (1 MB of float64) go through the numba loops when
numba imports; smaller ones through NumPy blocks."""

_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT32_BELOW = 2.0**128 - 2.0**103  # halfway between float32's largest and 2**128

F64 = NDArray[np.float64]
Floats = NDArray[np.floating]

_loaded: list[ModuleType | None] = []  # [the loops module or None], once tried


def compiled(dim: int) -> ModuleType | None:
    """Return :mod:`gossip.model._loops` if arrays of ``dim`` elements should use it (at least
    :data:`COMPILED_MIN_DIM`, and numba imports), else None. The first such call imports
    numba; the loops compile at their first call (or load from numba's cache)."""
    if dim < COMPILED_MIN_DIM:
        return None
    if not _loaded:
        try:
            from continuized.gossip.model import _loops as loops
        except ImportError:  # numba is optional: the NumPy blocks compute the same
            _loaded.append(None)
        else:
            _loaded.append(loops)
    return _loaded[0]


def _blocks(dim: int) -> range:
    return range(0, dim, BLOCK)


def state(sum_a: F64, sum_d: F64, factor: float, x: Floats, z: Floats | None = None) -> None:
    """Write ``x = a + f d`` (and ``z = a - f d`` if given) from half-sums ``a``, half-
    differences ``d`` and the mixing factor ``f``.

    Examples
    --------
    >>> x, z = np.empty(2), np.empty(2)
    >>> state(np.array([1.0, 2.0]), np.array([0.5, 0.0]), 0.5, x, z)
    >>> x.tolist(), z.tolist()
    ([1.25, 2.0], [0.75, 2.0])
    """
    dim = sum_a.size
    loops = compiled(dim)
    if loops is not None:
        if z is None:
            loops.state_x(sum_a, sum_d, factor, x)
        else:
            loops.state(sum_a, sum_d, factor, x, z)
        return
    scratch = np.empty(min(dim, BLOCK))
    for i in _blocks(dim):
        j = min(i + BLOCK, dim)
        fd = np.multiply(sum_d[i:j], factor, out=scratch[: j - i])
        np.add(sum_a[i:j], fd, out=x[i:j])
        if z is not None:
            np.subtract(sum_a[i:j], fd, out=z[i:j])


def flow(x_v: Floats, x_w: Floats, c: float, step: float, dx: Floats, dz: Floats) -> bool:
    """Write the flow into v of an exchange on edge {v, w}: ``dx = step (x_w - x_v)`` and
    ``dz = c (x_w - x_v)``, the gap in float64 (:func:`gossip.model.jumps.edge_flow`); return
    whether every value written is finite (:func:`_flow_finite`).

    Examples
    --------
    >>> dx, dz = np.empty(1), np.empty(1)
    >>> flow(np.array([1.0]), np.array([0.0]), 2.0, 0.5, dx, dz), dx.tolist(), dz.tolist()
    (True, [-0.5], [-2.0])
    """
    dim = x_v.size
    loops = compiled(dim)
    if loops is not None:  # it checks each value as it stores it: no second read
        return bool(loops.flow(x_v, x_w, c, step, dx, dz, stored_below(dx.dtype)))
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
    """Write :func:`flow` from ``x_v`` to the state ``x_w = a + f d`` (:func:`state`) of the
    half-sums and half-differences ``sums = (a, d)``: the server's flow, ``x_w`` never stored;
    return whether every value written is finite.

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
    loops = compiled(dim)
    if loops is not None:  # as in flow(): checked as it is stored
        below = stored_below(dx.dtype)
        return bool(loops.state_flow(sum_a, sum_d, factor, x_v, c, step, dx, dz, below))
    x_w = np.empty(min(dim, BLOCK))
    with np.errstate(over="ignore", invalid="ignore"):  # what overflows is refused below
        for i in _blocks(dim):
            j = min(i + BLOCK, dim)
            w = x_w[: j - i]
            state(sum_a[i:j], sum_d[i:j], factor, w)
            _flow_block(x_v[i:j], w, c, step, dx[i:j], dz[i:j], w)
    return _flow_finite(c, step, dx, dz)


def all_finite(x: Floats) -> bool:
    """Whether every value of the 1-d array ``x`` is finite, in one read (the numba loop
    :func:`gossip.model._loops.finite` for a large array).

    Examples
    --------
    >>> all_finite(np.array([1.0, -2.0])), all_finite(np.array([1.0, np.inf]))
    (True, False)
    """
    loops = compiled(x.size)
    if loops is not None:
        return bool(loops.finite(x))
    # One reduction instead of isfinite's temporary: an inf or a nan makes the sum inf or nan;
    # a sum that overflows from finite values only looks closer.
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.add.reduce(x))
    return total - total == 0.0 or bool(np.isfinite(x).all())


def stored_below(dtype: np.dtype) -> float:
    """The float64 magnitude from which a value stored in ``dtype`` is no longer finite:
    float32 rounds ``2**128 - 2**103`` and above to infinity (to nearest, ties to even), and
    float64 keeps every finite value.

    Examples
    --------
    >>> bound = stored_below(np.dtype(np.float32))
    >>> bool(np.isfinite(np.float32(np.nextafter(bound, 0.0)))), stored_below(np.dtype(np.float64))
    (True, inf)
    """
    return _FLOAT32_BELOW if dtype == np.float32 else math.inf


def _flow_finite(c: float, step: float, dx: Floats, dz: Floats) -> bool:
    """Whether every value of a flow ``dx = step g``, ``dz = c g`` is finite, from one read of
    the one of the two with the larger factor: its values are finite only if the gap is, and
    then the other's are too (each is the same gap times a factor no larger, rounded to the
    same dtype)."""
    return all_finite(dz if abs(c) >= abs(step) else dx)


def half_parts(dx: Floats, dz: Floats, k_a: float, k_d: float, a: F64, d: F64) -> bool:
    """Write ``a = k_a (dx + dz)`` and ``d = k_d (dx - dz)``, in float64; return whether all
    of them are finite (nothing else is written either way).

    A flow booked into a ledger is ``k_a = sign / 2`` and ``k_d = sign f / 2`` of it.

    Examples
    --------
    >>> a, d = np.empty(1), np.empty(1)
    >>> half_parts(np.array([3.0]), np.array([1.0]), 0.5, -0.5, a, d), a.tolist(), d.tolist()
    (True, [2.0], [-1.0])
    """
    dim = dx.size
    loops = compiled(dim)
    if loops is not None:
        return bool(loops.half_parts(dx, dz, k_a, k_d, a, d))
    with np.errstate(over="ignore", invalid="ignore"):  # what overflows is refused below
        return _half_parts_blocks(dx, dz, k_a, k_d, a, d)


def _half_parts_blocks(dx: Floats, dz: Floats, k_a: float, k_d: float, a: F64, d: F64) -> bool:
    dim = dx.size
    total = 0.0
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


def add_flow(a: F64, d: F64, row_a: F64, sum_a: F64, row_d: F64, sum_d: F64) -> None:
    """Add ``a`` to ``row_a`` and to ``sum_a``, and ``d`` to ``row_d`` and to ``sum_d``.

    Examples
    --------
    >>> r, s = np.zeros(1), np.ones(1)
    >>> add_flow(np.array([2.0]), np.array([3.0]), r, s, r, s)
    >>> r.tolist(), s.tolist()
    ([5.0], [6.0])
    """
    dim = a.size
    loops = compiled(dim)
    if loops is not None:
        loops.add_flow(a, d, row_a, sum_a, row_d, sum_d)
        return
    for i in _blocks(dim):
        j = min(i + BLOCK, dim)
        ab, db = a[i:j], d[i:j]
        np.add(row_a[i:j], ab, out=row_a[i:j])
        np.add(sum_a[i:j], ab, out=sum_a[i:j])
        np.add(row_d[i:j], db, out=row_d[i:j])
        np.add(sum_d[i:j], db, out=sum_d[i:j])


def one_pass(
    dx: Floats, dz: Floats, k_a: float, k_d: float, finite: bool = False
) -> ModuleType | None:
    """Return :mod:`gossip.model._loops` if a flow ``(dx, dz)`` can be booked with factors
    ``k_a`` and ``k_d`` by its one-pass loops, else None: the arrays are large enough
    (:func:`compiled`) and every value is far below overflow, so no half-part can overflow
    (one read of ``dx`` and ``dz``; none for float32 arrays the caller knows are ``finite``).
    A flow it refuses goes through :func:`half_parts`, which checks every value it writes.

    Examples
    --------
    >>> one_pass(np.ones(2), np.ones(2), 0.5, 0.5) is None   # too small to compile
    True
    """
    loops = compiled(dx.size)
    if loops is None or not math.isfinite(k_d):
        return None
    # |x|, |z| <= limit keeps x + z, x - z and their products by k_a, k_d finite.
    limit = sys.float_info.max / (4.0 * max(1.0, abs(k_a), abs(k_d)))
    # Every finite float32 is within the limit: finite is enough (a check that runs at the
    # speed of memory; the bounds' per-value compare does not).
    within = dx.dtype == dz.dtype == np.float32 and limit >= _FLOAT32_MAX
    if within and (finite or (loops.finite(dx) and loops.finite(dz))):
        return loops
    return loops if loops.bounded(dx, dz, limit) else None


def book(
    dx: Floats,
    dz: Floats,
    k_a: float,
    k_d: float,
    rows: tuple[F64, F64, F64, F64],
    scratch: tuple[F64, F64],
) -> bool:
    """Add a flow to a ledger row and its running sums: :func:`half_parts` into ``scratch``,
    then :func:`add_flow` into ``rows = (row_a, sum_a, row_d, sum_d)``; return False, with
    nothing changed, if a half-part is not finite.

    Compiled, a flow whose every value is far below overflow (one read of ``dx`` and ``dz``)
    is added in one more pass, its half-parts never written; any other goes the two-step way.

    Examples
    --------
    >>> rows = tuple(np.zeros(1) for _ in range(4))
    >>> book(np.array([3.0]), np.array([1.0]), 0.5, 0.5, rows, (np.empty(1), np.empty(1)))
    True
    >>> [r.tolist() for r in rows]
    [[2.0], [2.0], [1.0], [1.0]]
    """
    loops = one_pass(dx, dz, k_a, k_d)
    if loops is not None:
        loops.add_halves(dx, dz, k_a, k_d, *rows)
        return True
    a, d = scratch
    if not half_parts(dx, dz, k_a, k_d, a, d):
        return False
    add_flow(a, d, *rows)
    return True
