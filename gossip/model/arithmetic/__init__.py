"""A model's exchange arithmetic: one API, two backends, chosen once per array size.

An exchange of a model's parameters is a few vector formulas (the state ``x = a + f d``, the
flow ``dx = s (x_w - x_v)``, its booking into a ledger row and the running sum). Written as
whole-array NumPy expressions, every formula is several passes over arrays of megabytes, and
each pass reads them from memory again: about 30 passes per exchange at a million
parameters, which cost more than moving the bytes over the wire. :class:`Backend` is the API
that computes them with fewer passes; two modules implement it, with the same function names
and signatures:

* :mod:`gossip.model.arithmetic.numpy_blocks` -- each formula on cache-sized blocks: the large
  arrays are read once and written once per elementary operation;
* :mod:`gossip.model.arithmetic.numba_loops` -- each formula one numba loop: one pass over
  memory for the whole formula, a few passes per exchange instead of about 30 at a million
  parameters.

The rule: :func:`for_size` gives the numba loops for arrays of at least
:data:`COMPILED_MIN_DIM` elements when numba imports, the NumPy blocks otherwise. numba's
import alone is 60 MB of a process's memory, more than the whole of a small model's node,
which must fit a Raspberry Pi: a small model never imports it. A caller picks its backend once
(a :class:`~gossip.model.parameters.ParameterLedger` when it is built, for its dimension) and
calls its functions with no further choice.

Outputs may be float32 (the dtype a float32 model's frames carry): each value is computed in
float64 and rounded once when it is stored.

The rule both backends keep: **the arithmetic per element is that of the plain formula in
each docstring**, so the two agree to the bit; the tests check both against the plain NumPy
expression, and against each other.
"""

from __future__ import annotations

import functools
from typing import Protocol

from continuized.gossip.model.arithmetic import numpy_blocks
from continuized.gossip.model.arithmetic.floats import F64, Floats, stored_below

__all__ = ["COMPILED_MIN_DIM", "Backend", "all_finite", "for_size", "stored_below"]

COMPILED_MIN_DIM = 1 << 17
"""Arrays of at least this many elements (1 MB of float64) go through the numba loops when
numba imports; smaller ones through the NumPy blocks."""


class Backend(Protocol):
    """The fused arithmetic of a model's exchange, each function a formula written into
    arrays the caller gives (a module implements it: :func:`for_size`)."""

    def state(self, sum_a: F64, sum_d: F64, factor: float, x: Floats, z: Floats) -> None:
        """Write ``x = a + f d`` and ``z = a - f d`` from half-sums ``a``, half-differences
        ``d`` and the mixing factor ``f``."""

    def state_x(self, sum_a: F64, sum_d: F64, factor: float, x: Floats) -> None:
        """Write ``x = a + f d`` (:meth:`state` without ``z``)."""

    def flow(self, x_v: Floats, x_w: Floats, c: float, step: float, dx: Floats, dz: Floats) -> bool:
        """Write the flow into v of an exchange on edge {v, w}: ``dx = step (x_w - x_v)`` and
        ``dz = c (x_w - x_v)``, the gap in float64 (:func:`gossip.model.jumps.edge_flow`);
        return whether every value written is finite."""

    def state_flow(
        self,
        sums: tuple[F64, F64],
        factor: float,
        x_v: Floats,
        c: float,
        step: float,
        dx: Floats,
        dz: Floats,
    ) -> bool:
        """Write :meth:`flow` from ``x_v`` to the state ``x_w = a + f d`` of the half-sums and
        half-differences ``sums = (a, d)``: the server's flow, ``x_w`` never stored; return
        whether every value written is finite."""

    def all_finite(self, x: Floats) -> bool:
        """Whether every value of the 1-d array ``x`` is finite, in one read."""

    def half_parts(self, dx: Floats, dz: Floats, k_a: float, k_d: float, a: F64, d: F64) -> bool:
        """Write ``a = k_a (dx + dz)`` and ``d = k_d (dx - dz)``, in float64; return whether
        all of them are finite (nothing else is written either way). A flow booked into a
        ledger is ``k_a = sign / 2`` and ``k_d = sign f / 2`` of it."""

    def add_flow(self, a: F64, d: F64, row_a: F64, sum_a: F64, row_d: F64, sum_d: F64) -> None:
        """Add ``a`` to ``row_a`` and to ``sum_a``, and ``d`` to ``row_d`` and to ``sum_d``."""

    def book(
        self,
        dx: Floats,
        dz: Floats,
        k_a: float,
        k_d: float,
        rows: tuple[F64, F64, F64, F64],
        scratch: tuple[F64, F64],
    ) -> bool:
        """Add a flow to a ledger row and its running sums: :meth:`half_parts` (into
        ``scratch`` if it must be written), then :meth:`add_flow` into
        ``rows = (row_a, sum_a, row_d, sum_d)``; return False, with nothing changed, if a
        half-part is not finite."""

    def one_pass(
        self, dx: Floats, dz: Floats, k_a: float, k_d: float, finite: bool = False
    ) -> bool:
        """Whether the flow ``(dx, dz)`` with factors ``k_a`` and ``k_d`` may be kept and
        booked later, unchecked, in one pass (:meth:`add_halves`, :meth:`add_sums`,
        :meth:`pending_state`): the backend has such a pass, and no half-part can overflow.
        ``finite``: the caller knows every value is finite. A flow it refuses is booked at
        once by :meth:`book`, which checks every value it writes."""

    def add_halves(
        self,
        dx: Floats,
        dz: Floats,
        k_a: float,
        k_d: float,
        row_a: F64,
        sum_a: F64,
        row_d: F64,
        sum_d: F64,
    ) -> None:
        """:meth:`half_parts` then :meth:`add_flow`, unchecked, ``a`` and ``d`` never stored
        in arrays of the caller's."""

    def add_sums(
        self, dx: Floats, dz: Floats, k_a: float, k_d: float, sum_a: F64, sum_d: F64
    ) -> None:
        """``sum_a += k_a (dx + dz)`` and ``sum_d += k_d (dx - dz)``, unchecked: the running
        sums, or a row (the two halves of :meth:`add_halves`, done apart)."""

    def pending_state(
        self,
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
        """:meth:`state` of the sums with a flow added, ``a = sum_a + k_a (dx + dz)`` and
        ``d = sum_d + k_d (dx - dz)`` (what :meth:`add_halves` will store), the sums left as
        they are: a read of them, not a write."""


@functools.cache
def _numba_loops() -> Backend | None:
    """The numba backend, or None where numba does not import; tried once per process."""
    try:
        from continuized.gossip.model.arithmetic import numba_loops
    except ImportError:  # numba is optional: the NumPy blocks compute the same
        return None
    return numba_loops


def for_size(dim: int) -> Backend:
    """Return the backend for arrays of ``dim`` elements: the numba loops from
    :data:`COMPILED_MIN_DIM` on when numba imports, the NumPy blocks otherwise. The first call
    for a large size imports numba; the loops compile at their first call (or load from
    numba's cache).

    Examples
    --------
    >>> for_size(1000).__name__
    'continuized.gossip.model.arithmetic.numpy_blocks'
    """
    if dim >= COMPILED_MIN_DIM:
        loops = _numba_loops()
        if loops is not None:
            return loops
    return numpy_blocks


def all_finite(x: Floats) -> bool:
    """Whether every value of the 1-d array ``x`` is finite, in one read, by the backend for
    its size: the check of an array whose size no caller fixed once (a frame's).

    Examples
    --------
    >>> import numpy as np
    >>> all_finite(np.array([1.0, -2.0])), all_finite(np.array([1.0, np.inf]))
    (True, False)
    """
    return for_size(x.size).all_finite(x)
