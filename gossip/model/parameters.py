"""A node's ledger for a model's parameters: the same sums as :class:`~gossip.model.ledger.Ledger`,
held in numpy arrays, plus the node's own gradient steps.

:class:`~gossip.model.ledger.Ledger` keeps its rows as lists of floats, which is fastest for the
one or few components of a gossiped value and hopeless for the thousands of a model. This
variant keeps the same rows (half-sums ``a`` and half-differences ``d`` at ``t_ref``, one row
per edge and row 0 for the node's own part) as one ``(edges + 1, dim)`` array each, so every
operation is a few vector operations (:mod:`gossip.model.arithmetic`: NumPy blocks, or numba
loops for a large model, chosen once when the ledger is built); the exchanger sees the same
methods, given and returning arrays.

A gradient step moves ``x`` and ``z`` (A²CiD²'s ``x~``) by the same ``-step``
(:meth:`ParameterLedger.add_local`). Its half-difference is 0, which the mixing flow leaves
alone, so the step goes into row 0's half-sum at whatever time it is taken: no mixing, and the
sums over the edges, hence the conservation of ``x`` over the network by the jumps, are
untouched. Recovery from the neighbours' ledgers restores the jumps, never the local steps.

Lazy booking. At a million parameters, booking a flow (its row and the running sums: four
float64 arrays read and written) costs more than the rest of an exchange's arithmetic. Only the
sums are needed soon, by the node's next state or flow; the row only by recovery. So
:meth:`ParameterLedger.add_values` checks a flow and keeps it (the backend's
:meth:`~gossip.model.arithmetic.Backend.one_pass`), and adds it later: a server, after it has
sent the Reply; an initiator builds its next ``x`` and ``z`` from its sums and the Reply's flow
in one pass that only reads them (:meth:`~gossip.model.arithmetic.Backend.pending_state`), and
adds the flow to its sums and its row after that request has left
(:meth:`ParameterLedger.settle`, which the node runs once the frame is gone:
:mod:`node.transport.departures`), so that writing the sums is off the exchange's path. Every
method that reads the ledger adds what is pending first, in the order the flows came, with the
same operations, so results are the same to the bit whenever the work is done. Only arrays that
nobody can change in the meantime are kept: the read-only ones a received frame holds
(:func:`gossip.wire.schema.decode`) and the flows this ledger computed (read-only until its pool
hands them out again); any other is booked at once, as is every flow of a model below
:data:`~gossip.model.arithmetic.COMPILED_MIN_DIM` (the NumPy blocks have no one-pass booking).

float32 models. The rows and their running sums are float64 whatever the model's dtype: they
add up every flow of the run, and the network's sum of ``x`` is conserved only as exactly as
those sums are kept (in float32 each addition would round at 6e-8 of the row, and a long run
would drift by far more than the lr=0 test's 1e-9). Cheaper bookkeeping was weighed and not
taken: Kahan-compensated float32 keeps a float32 compensation beside each float32 sum, the
same 8 bytes per value as float64 with more operations; float32 rows with float64 sums would
save a quarter of a booking's bytes but make a recovered ledger (whose sums are rebuilt from
its rows) inexact. What matters more is *when* a booking is done (lazy booking, above), not
its width. What a float32 ledger changes is its
frames: the ``x`` and ``z`` it sends and the flows it computes as a server
(:meth:`ParameterLedger.wire_state`, :meth:`ParameterLedger.flow_values`) are float32 arrays,
half the bytes. A flow is rounded to float32 once, by the server, *before* either end books
it, and both ends book the same float32 numbers, so the two ends' rows stay opposite and the
conservation is as exact as in float64; what float32 costs is only the rounding of the values
exchanged, at the precision the model itself computes with.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from continuized.gossip.errors import ConfigError
from continuized.gossip.model import arithmetic
from continuized.gossip.model._arraypool import ArrayPool
from continuized.gossip.model.jumps import Flow
from continuized.gossip.model.ledger import REBASE_SPAN, Ledger
from continuized.gossip.model.mixing import Values, decay_value

__all__ = ["ParameterLedger", "all_finite"]

all_finite = arithmetic.all_finite
"""Whether every value of a 1-d float array is finite, in one read: the check of a ledger's
flows, and of the arrays a frame carries (:mod:`gossip.wire.hot`)."""

FloatArray = NDArray[np.float64]
WireArray = NDArray[np.float64] | NDArray[np.float32]
_Booking = tuple[int, WireArray, WireArray, float, float]
"""A deferred flow: the row's slot, ``dx``, ``dz``, ``k_a`` and ``k_d``."""
_WIRE_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


class ParameterLedger(Ledger):
    """A :class:`~gossip.model.ledger.Ledger` on arrays, with the node's gradient steps.

    Examples
    --------
    >>> a = ParameterLedger(np.zeros(3), [0], eta=0.5)
    >>> a.add_local(np.ones(3))            # a gradient step of -1 on every parameter
    >>> a.add_values(0, np.full(3, 0.5), np.full(3, 2.0), 1.0)   # a jump's flow in at t = 1
    >>> x, z = a.state(1.0)
    >>> x.tolist(), z.tolist()
    ([-0.5, -0.5, -0.5], [1.0, 1.0, 1.0])
    """

    lazy: ClassVar[bool] = True

    def __init__(self, initial: ArrayLike, edges: list[int], eta: float, t0: float = 0.0):
        super().__init__([0.0], edges, eta, t0)  # checks eta and the edges
        given = np.asarray(initial)
        # A float32 model's frames carry float32 (see the module); anything else, float64.
        self.wire_dtype = given.dtype if given.dtype in _WIRE_DTYPES else np.dtype(np.float64)
        x0 = np.atleast_1d(np.asarray(initial, dtype=np.float64)).copy()
        if x0.ndim != 1 or not np.all(np.isfinite(x0)):
            raise ConfigError(f"initial parameters must be a finite vector, got shape {x0.shape}")
        self._dim = int(x0.size)
        # The arithmetic's backend, chosen once for this size: every operation calls it.
        self._ops = arithmetic.for_size(self._dim)
        rows = len(self.edges) + 1
        self._rows_a = np.zeros((rows, self._dim))
        self._rows_d = np.zeros((rows, self._dim))
        self._rows_a[0] = x0
        self._sum_a = x0.copy()
        self._sum_d = np.zeros(self._dim)
        self._scratch = (np.empty(self._dim), np.empty(self._dim))
        # The arrays it returns (x and z, a flow) go into frames: reused once unshared.
        self._pool = ArrayPool(self._dim, np.float64)
        self._wire_pool = (
            self._pool if self.wire_dtype == np.float64 else ArrayPool(self._dim, self.wire_dtype)
        )
        self._initial = x0
        self._initial.setflags(write=False)
        # A booking not yet added (see the module, "Lazy booking"), and whether its running
        # sums are (its row is not yet).
        self._deferred: _Booking | None = None
        self._sums_booked = False

    def settle(self) -> None:
        """Add the flow :meth:`add_values` left to add (see the module, "Lazy booking"); call it
        when the node is idle, after a send. Every method that reads the ledger settles first,
        so calling it changes when the work is done, never a result."""
        booking = self._deferred
        if booking is None:
            return
        self._deferred = None
        slot, fx, fz, k_a, k_d = booking
        row_a, row_d = self._rows_a[slot], self._rows_d[slot]
        if self._sums_booked:
            self._ops.add_sums(fx, fz, k_a, k_d, row_a, row_d)
        else:
            self._ops.add_halves(fx, fz, k_a, k_d, row_a, self._sum_a, row_d, self._sum_d)

    def _book_sums(self) -> _Booking | None:
        """Add a deferred flow to the running sums (not yet to its row); return the booking
        whose sums were still to add, without adding them, if the caller adds them itself."""
        booking = self._deferred
        if booking is None or self._sums_booked:
            return None
        self._sums_booked = True
        return booking

    def _add_sums(self) -> None:
        booking = self._book_sums()
        if booking is not None:
            _, fx, fz, k_a, k_d = booking
            self._ops.add_sums(fx, fz, k_a, k_d, self._sum_a, self._sum_d)

    def rebase(self, t: float) -> None:
        """Hold the rows at ``t`` if they are held far from it (:meth:`Ledger.rebase`)."""
        if self.eta > 0 and 2.0 * self.eta * abs(t - self._t_ref) > REBASE_SPAN:
            self.settle()  # a deferred flow is mixed to the old t_ref
            factor = decay_value(self.eta, t - self._t_ref)
            self._rows_d *= factor
            self._sum_d *= factor
            self._t_ref = t

    def state_values(self, t: float) -> tuple[FloatArray, FloatArray]:
        """Return the node's ``(x, z)`` at time ``t``, in arrays that are the caller's while
        it holds them (:class:`~gossip.model._arraypool.ArrayPool`)."""
        if not math.isfinite(t):
            raise ConfigError(f"state time must be finite, got {t!r}")
        return self._state_in(self._pool, t)  # type: ignore[return-value]  # float64 pool

    def x_values(self, t: float) -> FloatArray:
        """Return the node's ``x`` at time ``t`` (:meth:`state_values` without ``z``)."""
        if not math.isfinite(t):
            raise ConfigError(f"state time must be finite, got {t!r}")
        self.rebase(t)
        self._add_sums()
        x: FloatArray = self._pool.take()
        self._ops.state_x(self._sum_a, self._sum_d, decay_value(self.eta, t - self._t_ref), x)
        return x

    def wire_state(self, t: float) -> tuple[WireArray, WireArray]:
        """Return :meth:`state_values` in the dtype of the node's frames (:attr:`wire_dtype`,
        float32 for a float32 model: see the module)."""
        if not math.isfinite(t):
            raise ConfigError(f"state time must be finite, got {t!r}")
        return self._state_in(self._wire_pool, t)

    def _state_in(self, pool: ArrayPool, t: float) -> tuple[WireArray, WireArray]:
        self.rebase(t)
        x, z = pool.take(), pool.take()
        factor = decay_value(self.eta, t - self._t_ref)
        booking = self._deferred
        if booking is None or self._sums_booked:
            self._ops.state(self._sum_a, self._sum_d, factor, x, z)
        else:  # the client's next request: x and z with the reply's flow, the sums only read
            _, fx, fz, k_a, k_d = booking
            self._ops.pending_state(fx, fz, k_a, k_d, self._sum_a, self._sum_d, factor, x, z)
        return x, z

    def flow_values(
        self, x_v: Values, x_w: Values, c: float, step: float = 0.5
    ) -> tuple[WireArray, WireArray]:
        """Return :func:`~gossip.model.jumps.edge_flow_values` ``(dx, dz)`` into v, the same
        arithmetic, in arrays of :attr:`wire_dtype` that are the caller's while it holds them.

        Raises
        ------
        ConfigError
            ``x_v`` or ``x_w`` is not ``dim`` values, or a value of the flow is not finite
            (in :attr:`wire_dtype`).
        """
        v, w = self._vector(x_v), self._vector(x_w)
        if v.shape != (self._dim,) or w.shape != (self._dim,):
            raise ConfigError(
                f"values have {v.size} and {w.size} components; this ledger's dim is {self._dim}"
            )
        dx, dz = self._wire_pool.take(), self._wire_pool.take()
        if not self._ops.flow(v, w, c, step, dx, dz):
            raise ConfigError(f"the flow between these values is not finite (c={c!r}); refused")
        return _read_only(dx), _read_only(dz)

    def flow_at(
        self, x_v: Values, t: float, c: float, step: float = 0.5
    ) -> tuple[WireArray, WireArray]:
        """Return :meth:`flow_values` from ``x_v`` to this node's ``x`` at time ``t``, the same
        numbers, without building ``x`` (one pass for the numba loops:
        :meth:`~gossip.model.arithmetic.Backend.state_flow`).

        Raises
        ------
        ConfigError
            ``t`` is not finite, ``x_v`` is not ``dim`` values, or a value of the flow is not
            finite (in :attr:`wire_dtype`).
        """
        if not math.isfinite(t):
            raise ConfigError(f"state time must be finite, got {t!r}")
        v = self._vector(x_v)
        if v.shape != (self._dim,):
            raise ConfigError(f"values have {v.size} components; this ledger's dim is {self._dim}")
        self.rebase(t)
        self._add_sums()
        dx, dz = self._wire_pool.take(), self._wire_pool.take()
        factor = decay_value(self.eta, t - self._t_ref)
        if not self._ops.state_flow((self._sum_a, self._sum_d), factor, v, c, step, dx, dz):
            raise ConfigError(f"the flow at t={t!r} is not finite (c={c!r}); refused")
        return _read_only(dx), _read_only(dz)

    @staticmethod
    def _vector(values: Values) -> WireArray:
        """``values`` as an array, float32 and float64 ones as they are (no copy)."""
        if isinstance(values, np.ndarray) and values.dtype in _WIRE_DTYPES:
            return values
        return np.asarray(values, dtype=np.float64)

    def state(self, t: float) -> tuple[FloatArray, FloatArray]:
        """Return the node's ``(x, z)`` at time ``t`` (:meth:`state_values`)."""
        return self.state_values(t)

    def add_values(
        self,
        edge: int,
        dx: Values,
        dz: Values,
        t: float,
        sign: float = 1.0,
        *,
        finite: bool = False,
    ) -> None:
        """Add ``sign * (dx, dz)``, computed at time ``t``, to the ledger of ``edge``.

        A float32 flow the caller knows is ``finite`` (a decoded frame's, or one this ledger
        computed) is booked without a read to check it: every finite float32 stays finite in
        the float64 booking, whatever the mixing factor short of overflow
        (:meth:`~gossip.model.arithmetic.Backend.one_pass`).

        Raises
        ------
        LocalError
            ``edge`` is not one of the node's edges.
        ConfigError
            ``t`` or the flow mixed to the reference time is not finite, or a component count
            is not ``dim``; nothing is changed.
        """
        slot = self._slot(edge)
        fx, fz = self._flow_arrays(dx, dz, t)
        self.settle()
        k_a, k_d = 0.5 * sign, 0.5 * sign * decay_value(self.eta, self._t_ref - t)
        frozen = not (fx.flags.writeable or fz.flags.writeable)  # nobody can change them
        if frozen and self._ops.one_pass(fx, fz, k_a, k_d, finite):  # so it may wait
            self._deferred, self._sums_booked = (slot, fx, fz, k_a, k_d), False
            return
        rows = (self._rows_a[slot], self._sum_a, self._rows_d[slot], self._sum_d)
        if not (math.isfinite(k_d) and self._ops.book(fx, fz, k_a, k_d, rows, self._scratch)):
            raise ConfigError(
                f"flow at t={t!r} is not finite once mixed to t_ref={self._t_ref!r}; refused"
            )

    def add_local(self, step: ArrayLike) -> None:
        """Move ``x`` and ``z`` by ``-step`` (a gradient step), at any time: see the module.

        Raises
        ------
        ConfigError
            ``step`` is not ``dim`` finite numbers; nothing is changed.
        """
        delta = np.asarray(step, dtype=np.float64)
        if delta.shape != (self._dim,) or not np.isfinite(delta).all():
            raise ConfigError(
                f"a gradient step must be {self._dim} finite numbers, got shape {delta.shape}"
            )
        self._add_sums()  # in the order they came: the sums are the same to the bit
        self._rows_a[0] -= delta
        self._sum_a -= delta

    def edge_total(self, edge: int, t: float) -> Flow:
        """Return the cumulative flow in through ``edge``, mixed to time ``t``: ``F_e(t)``."""
        slot = self._slot(edge)
        self.settle()
        d = self._rows_d[slot] * decay_value(self.eta, t - self._t_ref)
        return Flow(self._rows_a[slot] + d, self._rows_a[slot] - d)

    def set_edge_total(self, edge: int, total: Flow, t: float) -> None:
        """Replace the ledger of ``edge`` with ``total`` taken at time ``t`` (used to recover)."""
        slot = self._slot(edge)
        self.settle()
        a, d = self._moved_arrays(total.dx, total.dz, t)
        self._rows_a[slot], self._rows_d[slot] = a, d
        self._sum_a = self._rows_a.sum(axis=0)
        self._sum_d = self._rows_d.sum(axis=0)

    def _flow_arrays(self, dx: Values, dz: Values, t: float) -> tuple[WireArray, WireArray]:
        """``dx`` and ``dz`` as arrays (float32 ones as they are), checked: a finite time,
        ``dim`` components each."""
        if not math.isfinite(t):
            raise ConfigError(f"flow time must be finite, got {t!r}")
        fx, fz = self._vector(dx), self._vector(dz)
        if fx.shape != (self._dim,) or fz.shape != (self._dim,):
            raise ConfigError(
                f"flow has {fx.size} and {fz.size} components; this ledger's dim is {self._dim}"
            )
        return fx, fz

    def _moved_arrays(
        self, dx: Values, dz: Values, t: float, sign: float = 1.0
    ) -> tuple[FloatArray, FloatArray]:
        """``sign`` times the flow's half-sum and half-difference moved from ``t`` to
        ``t_ref``, checked, in the ledger's two scratch arrays (valid until the next call)."""
        fx, fz = self._flow_arrays(dx, dz, t)
        # In buffers kept from call to call: at a million parameters a fresh array per
        # operation costs more in page faults than the arithmetic.
        a, d = self._scratch
        k_d = 0.5 * sign * decay_value(self.eta, self._t_ref - t)
        if not (math.isfinite(k_d) and self._ops.half_parts(fx, fz, 0.5 * sign, k_d, a, d)):
            raise ConfigError(
                f"flow at t={t!r} is not finite once mixed to t_ref={self._t_ref!r}; refused"
            )
        return a, d


def _read_only(array: WireArray) -> WireArray:
    """``array``, made read-only: a flow handed out may be booked lazily (see the module); the
    pool makes it writable again when it hands it out anew."""
    array.flags.writeable = False
    return array
