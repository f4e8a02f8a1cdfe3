"""A node's state as its initial value plus a per-edge flow ledger.

Theory
------
The mixing flow ``Phi(tau)`` is linear and the same at every node, and a jump is an additive
flow across an edge. So a node's pair ``(x, z)`` at time t is::

    (x, z)(t) = Phi(t - t0) (x0, x0)  +  sum over edges e at the node of  F_e(t),
    F_e(t)    = sum over the exchanges k on e of  Phi(t - T_k) (dx_k, dz_k),

where ``x0`` is the node's initial value, ``t0`` the start, and ``(dx_k, dz_k)`` the flow that
came in through edge e at the exchange's time ``T_k``. The two ends of an edge hold opposite
ledgers, ``F_e`` at one end is ``-F_e`` at the other, which is why the network-wide sum of
``x`` never changes, and why a node that lost its state can rebuild it from its neighbours.

Nothing is integrated step by step. Every row (the initial value and one row per edge) is kept
as its value at a common reference time ``t_ref``, and mixed to the time asked for on demand.
A flow computed at time T is folded into its row as ``Phi(t_ref - T)`` of itself (what
:func:`gossip.model.jumps.late_flow` computes), whatever the order in which flows arrive: applying a
flow late, early, or twice and then its negative, all give the exact sums.

The rows are stored in the coordinates of :mod:`gossip.model.mixing`: the half-sum ``a = (x +
z)/2``, which the flow leaves alone, and the half-difference ``d = (x - z)/2``, which it scales by
:func:`gossip.model.mixing.decay`. Moving a row through time is then one multiplication, exact to
rounding in both directions; in ``(x, z)`` coordinates a flow moved back by ``tau`` would
carry ``exp(2 eta tau)``-sized terms that cancel and lose digits. ``t_ref`` follows the
node's own clock so that the factors stay near 1.

Rows are plain lists of floats, not numpy arrays: a node's value has one or a few components,
and numpy's per-call overhead on such tiny arrays is many times the arithmetic (this is the
hot path of every exchange). :meth:`Ledger.state_values` and :meth:`Ledger.add_values` work
on floats directly; :meth:`Ledger.state` and :meth:`Ledger.add` are the same operations on
arrays.

Times are in units of t (activations per node pair), never seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from continuized.gossip.errors import ConfigError, LocalError
from continuized.gossip.model.jumps import Flow, edge_flow_values
from continuized.gossip.model.mixing import Values, decay_value

__all__ = ["REBASE_SPAN", "Ledger"]

FloatArray = NDArray[np.float64]

REBASE_SPAN = 0.25
"""Move ``t_ref`` when ``2 eta |t - t_ref|`` exceeds this (a factor ``e^0.25`` at most)."""


class Ledger:
    """The state of one node: its initial value and the cumulative flow through each edge.

    Parameters
    ----------
    initial : array_like, shape (dim,) or scalar
        The node's own initial value ``x0`` (``z`` starts equal to ``x``).
    edges : iterable of int
        The indices of the node's edges (global edge numbers, as in the topology).
    eta : float
        The mixing rate (``0`` for RG).
    t0 : float
        The time of ``initial``, in units of t.

    Examples
    --------
    >>> from continuized.gossip.model.jumps import edge_flow
    >>> a, b = Ledger([1.0], [0], eta=0.0), Ledger([0.0], [0], eta=0.0)
    >>> f = edge_flow(a.state(1.0)[0], b.state(1.0)[0], c=0.0)   # flow into a
    >>> a.add(0, f, 1.0); b.add(0, f, 1.0, sign=-1.0)
    >>> float(a.state(2.0)[0][0]), float(b.state(2.0)[0][0])
    (0.5, 0.5)
    """

    lazy: ClassVar[bool] = False
    """Whether a booking leaves arithmetic for :meth:`settle` (a model's ledger): a node hands
    ``settle`` to its transport only then, not for every frame."""

    def __init__(self, initial: ArrayLike, edges: Iterable[int], eta: float, t0: float = 0.0):
        x0 = np.atleast_1d(np.asarray(initial, dtype=np.float64)).copy()
        if x0.ndim != 1 or not np.all(np.isfinite(x0)):
            raise ConfigError(f"initial value must be a finite scalar or vector, got {initial!r}")
        if not (np.isfinite(eta) and eta >= 0):
            raise ConfigError(f"eta must be finite and >= 0, got {eta!r}")
        edge_list = [int(e) for e in edges]
        if len(set(edge_list)) != len(edge_list):
            raise ConfigError(f"edges must be distinct, got {edge_list}")
        self.eta = float(eta)
        self.edges: tuple[int, ...] = tuple(edge_list)
        self._row = {e: i + 1 for i, e in enumerate(edge_list)}
        dim = int(x0.size)
        self._dim = dim
        rows = len(edge_list) + 1
        # Half-sums and half-differences at t_ref, row 0: the initial value (x = z = x0: d = 0).
        self._a: list[list[float]] = [[0.0] * dim for _ in range(rows)]
        self._d: list[list[float]] = [[0.0] * dim for _ in range(rows)]
        self._a[0] = x0.tolist()
        # Running sums of the rows: state() is asked for at every exchange, the rows rarely.
        self._a_total = x0.tolist()
        self._d_total = [0.0] * dim
        self._initial = x0
        self._initial.setflags(write=False)
        self._t_ref = float(t0)

    @property
    def dim(self) -> int:
        """Number of components of the value."""
        return self._dim

    @property
    def initial(self) -> FloatArray:
        """The node's initial value ``x0`` (read-only)."""
        return self._initial

    def _slot(self, edge: int) -> int:
        try:
            return self._row[edge]
        except KeyError:
            raise LocalError(
                f"edge {edge} is not at this node; its edges are {list(self.edges)}"
            ) from None

    def rebase(self, t: float) -> None:
        """Hold the rows at ``t`` if they are held far from it (exact to rounding).

        Call it with this node's own time only: a peer's time may be far off."""
        # Keep every row near the times being asked for, so exp(+-2 eta tau) stays near 1.
        if self.eta > 0 and 2.0 * self.eta * abs(t - self._t_ref) > REBASE_SPAN:
            factor = decay_value(self.eta, t - self._t_ref)
            self._d = [[v * factor for v in row] for row in self._d]
            self._d_total = [v * factor for v in self._d_total]
            self._t_ref = t

    def state_values(self, t: float) -> tuple[Values, Values]:
        """Return the node's ``(x, z)`` at time ``t`` as lists of floats (see :meth:`state`)."""
        if not math.isfinite(t):
            raise ConfigError(f"state time must be finite, got {t!r}")
        self.rebase(t)
        factor = decay_value(self.eta, t - self._t_ref)
        if self._dim == 1:  # the common case, without the loops
            a, d = self._a_total[0], self._d_total[0] * factor
            return [a + d], [a - d]
        x = [a + d * factor for a, d in zip(self._a_total, self._d_total, strict=True)]
        z = [a - d * factor for a, d in zip(self._a_total, self._d_total, strict=True)]
        return x, z

    def x_values(self, t: float) -> Values:
        """Return the node's ``x`` at time ``t`` (:meth:`state_values` without ``z``)."""
        return self.state_values(t)[0]

    def wire_state(self, t: float) -> tuple[Values, Values]:
        """Return :meth:`state_values` as the node's frames carry it (the same, here; an
        array ledger may round it to its frames' dtype)."""
        return self.state_values(t)

    def flow_values(
        self, x_v: Values, x_w: Values, c: float, step: float = 0.5
    ) -> tuple[Values, Values]:
        """Return :func:`~gossip.model.jumps.edge_flow_values` ``(dx, dz)`` into v, for an
        exchange of this ledger's node (an array ledger writes them into arrays it keeps)."""
        return edge_flow_values(x_v, x_w, c, step)

    def flow_at(self, x_v: Values, t: float, c: float, step: float = 0.5) -> tuple[Values, Values]:
        """Return :meth:`flow_values` from ``x_v`` to this node's own ``x`` at time ``t``: a
        server's flow when the exchanged value is ``x`` itself."""
        return self.flow_values(x_v, self.x_values(t), c, step)

    def state(self, t: float) -> tuple[FloatArray, FloatArray]:
        """Return the node's ``(x, z)`` at time ``t``: every row mixed to ``t`` and summed.

        Row ``r`` held at ``t_ref`` contributes ``a_r + d_r exp(-2 eta (t - t_ref))`` to ``x``
        and ``a_r - d_r exp(-2 eta (t - t_ref))`` to ``z``.

        Parameters
        ----------
        t : float
            Time in units of t. Any time works, before or after the flows' own times.

        Raises
        ------
        ConfigError
            ``t`` is not finite.
        """
        x, z = self.state_values(t)
        return np.array(x, dtype=np.float64), np.array(z, dtype=np.float64)

    def add(self, edge: int, flow: Flow, t: float, sign: float = 1.0) -> None:
        """Add ``sign * flow``, computed at time ``t``, to the ledger of ``edge``.

        The flow counts from ``t`` on, as if applied at ``t``, even when added later
        (docs/design.md). ``sign=-1`` is the other end of the edge, or undoes an earlier ``add``.

        Raises
        ------
        LocalError
            ``edge`` is not one of the node's edges.
        ConfigError
            ``t`` or the flow mixed to the reference time is not finite; nothing is changed.
        """
        dx, dz = self._components(flow)
        self.add_values(edge, dx, dz, t, sign)

    def settle(self) -> None:
        """Do the arithmetic a booking left for later: nothing here, where every booking is
        added at once (a model's ledger defers part of it,
        :meth:`gossip.model.parameters.ParameterLedger.settle`). A node calls it when idle."""

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

        :meth:`add` on plain floats: ``dx`` and ``dz`` have ``dim`` components each.
        ``finite`` says the caller knows every value is finite: an array ledger then spares a
        read of a float32 flow (:meth:`gossip.model.parameters.ParameterLedger.add_values`);
        plain floats are checked all the same.

        Raises
        ------
        LocalError
            ``edge`` is not one of the node's edges.
        ConfigError
            ``t`` or the flow mixed to the reference time is not finite, or a component count
            is not ``dim``; nothing is changed.
        """
        slot = self._slot(edge)
        a, d = self._moved(dx, dz, t)
        if self._dim == 1:  # the common case, without the loops
            a0, d0 = sign * a[0], sign * d[0]
            self._a[slot][0] += a0
            self._a_total[0] += a0
            self._d[slot][0] += d0
            self._d_total[0] += d0
            return
        if sign != 1.0:
            a, d = [sign * v for v in a], [sign * v for v in d]
        rows = ((self._a[slot], self._a_total, a), (self._d[slot], self._d_total, d))
        for row, total, delta in rows:
            for i, v in enumerate(delta):
                row[i] += v
                total[i] += v

    def edge_total(self, edge: int, t: float) -> Flow:
        """Return the cumulative flow in through ``edge``, mixed to time ``t``: ``F_e(t)``."""
        slot = self._slot(edge)
        factor = decay_value(self.eta, t - self._t_ref)
        a = np.array(self._a[slot], dtype=np.float64)
        d = np.array(self._d[slot], dtype=np.float64) * factor
        return Flow(a + d, a - d)

    def set_edge_total(self, edge: int, total: Flow, t: float) -> None:
        """Replace the ledger of ``edge`` with ``total`` taken at time ``t`` (used to recover).

        A restarted node sets each edge to minus its neighbour's ledger on that edge, which
        restores exactly the state it had.
        """
        slot = self._slot(edge)
        dx, dz = self._components(total)
        self._a[slot], self._d[slot] = self._moved(dx, dz, t)
        self._a_total = [math.fsum(col) for col in zip(*self._a, strict=True)]
        self._d_total = [math.fsum(col) for col in zip(*self._d, strict=True)]

    def _components(self, flow: Flow) -> tuple[list[float], list[float]]:
        dx = np.asarray(flow.dx, dtype=np.float64)
        dz = np.asarray(flow.dz, dtype=np.float64)
        if dx.shape != (self._dim,) or dz.shape != (self._dim,):
            dx, dz = np.broadcast_to(dx, (self._dim,)), np.broadcast_to(dz, (self._dim,))
        return dx.tolist(), dz.tolist()

    def _moved(self, dx: Values, dz: Values, t: float) -> tuple[list[float], list[float]]:
        """Return the flow's half-sum and its half-difference moved from ``t`` to ``t_ref``."""
        # Check before touching any row: a flow from a far-off time, or huge values, would
        # overflow to inf and poison the state for good.
        if not math.isfinite(t):
            raise ConfigError(f"flow time must be finite, got {t!r}")
        if len(dx) != self._dim or len(dz) != self._dim:
            raise ConfigError(
                f"flow has {len(dx)} and {len(dz)} components; this ledger's dim is {self._dim}"
            )
        # No rebase here: t may come from a peer; only our own clock (state) moves t_ref.
        factor = decay_value(self.eta, self._t_ref - t)
        if self._dim == 1:  # the common case, without the loops
            a, d = [0.5 * (dx[0] + dz[0])], [0.5 * (dx[0] - dz[0]) * factor]
            total = a[0] + d[0]
        else:
            a = [0.5 * (x + z) for x, z in zip(dx, dz, strict=True)]
            d = [0.5 * (x - z) * factor for x, z in zip(dx, dz, strict=True)]
            total = sum(a) + sum(d)
        # One sum for the check: any inf or nan makes the sum inf or nan.
        if not math.isfinite(total):
            raise ConfigError(
                f"flow at t={t!r} is not finite once mixed to t_ref={self._t_ref!r}; refused"
            )
        return a, d
