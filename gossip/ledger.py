"""A node's state as its initial value plus a per-edge flow ledger (SPEC section 5).

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
:func:`gossip.jumps.late_flow` computes), whatever the order in which flows arrive: applying a
flow late, early, or twice and then its negative, all give the exact sums.

The rows are stored in the coordinates of :mod:`gossip.mixing`: the half-sum ``a = (x + z)/2``,
which the flow leaves alone, and the half-difference ``d = (x - z)/2``, which it scales by
:func:`gossip.mixing.decay`. Moving a row through time is then one multiplication, exact to
rounding in both directions; in ``(x, z)`` coordinates a flow moved back by ``tau`` would
carry ``exp(2 eta tau)``-sized terms that cancel and lose digits. ``t_ref`` follows the
node's own clock so that the factors stay near 1.

Times are in units of t (activations per node pair), never seconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from gossip.errors import ConfigError, LocalError
from gossip.jumps import Flow
from gossip.mixing import decay

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
    >>> from gossip.jumps import edge_flow
    >>> a, b = Ledger([1.0], [0], eta=0.0), Ledger([0.0], [0], eta=0.0)
    >>> f = edge_flow(a.state(1.0)[0], b.state(1.0)[0], c=0.0)   # flow into a
    >>> a.add(0, f, 1.0); b.add(0, f, 1.0, sign=-1.0)
    >>> float(a.state(2.0)[0][0]), float(b.state(2.0)[0][0])
    (0.5, 0.5)
    """

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
        rows = len(edge_list) + 1
        self._a = np.zeros((rows, x0.size), dtype=np.float64)  # half-sums, row 0: initial
        self._d = np.zeros((rows, x0.size), dtype=np.float64)  # half-differences at t_ref
        self._a[0] = x0  # x = z = x0: d = 0
        # Running sums of the rows: state() is asked for at every exchange, the rows rarely.
        self._a_total = x0.copy()
        self._d_total = np.zeros(x0.size, dtype=np.float64)
        self._initial = x0
        self._initial.setflags(write=False)
        self._t_ref = float(t0)

    @property
    def dim(self) -> int:
        """Number of components of the value."""
        return int(self._a.shape[1])

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

    def _rebase(self, t: float) -> None:
        # Keep every row near the times being asked for, so exp(+-2 eta tau) stays near 1.
        if self.eta > 0 and 2.0 * self.eta * abs(t - self._t_ref) > REBASE_SPAN:
            factor = decay(self.eta, t - self._t_ref)
            self._d = self._d * factor
            self._d_total = self._d_total * factor
            self._t_ref = t

    def state(self, t: float) -> tuple[FloatArray, FloatArray]:
        """Return the node's ``(x, z)`` at time ``t``: every row mixed to ``t`` and summed.

        Parameters
        ----------
        t : float
            Time in units of t. Any time works, before or after the flows' own times.

        Raises
        ------
        ConfigError
            ``t`` is not finite.
        """
        if not math.isfinite(t):
            raise ConfigError(f"state time must be finite, got {t!r}")
        self._rebase(t)
        a = self._a_total
        d = self._d_total * decay(self.eta, t - self._t_ref)
        return a + d, a - d

    def add(self, edge: int, flow: Flow, t: float, sign: float = 1.0) -> None:
        """Add ``sign * flow``, computed at time ``t``, to the ledger of ``edge``.

        The flow counts from ``t`` on, as if applied at ``t``, even when added later (SPEC
        section 5). ``sign=-1`` is the other end of the edge, or undoes an earlier ``add``.

        Raises
        ------
        LocalError
            ``edge`` is not one of the node's edges.
        ConfigError
            ``t`` or the flow mixed to the reference time is not finite; nothing is changed.
        """
        slot = self._slot(edge)
        a, d = self._moved(flow, t)
        if sign != 1.0:
            a, d = sign * a, sign * d
        self._a[slot] += a
        self._d[slot] += d
        self._a_total += a
        self._d_total += d

    def edge_total(self, edge: int, t: float) -> Flow:
        """Return the cumulative flow in through ``edge``, mixed to time ``t``: ``F_e(t)``."""
        slot = self._slot(edge)
        a = self._a[slot].copy()
        d = self._d[slot] * decay(self.eta, t - self._t_ref)
        return Flow(a + d, a - d)

    def set_edge_total(self, edge: int, total: Flow, t: float) -> None:
        """Replace the ledger of ``edge`` with ``total`` taken at time ``t`` (used to recover).

        A restarted node sets each edge to minus its neighbour's ledger on that edge, which
        restores exactly the state it had (SPEC section 5).
        """
        slot = self._slot(edge)
        self._a[slot], self._d[slot] = self._moved(total, t)
        self._a_total = self._a.sum(axis=0)
        self._d_total = self._d.sum(axis=0)

    def _moved(self, flow: Flow, t: float) -> tuple[FloatArray, FloatArray]:
        """Return the flow's half-sum and its half-difference moved from ``t`` to ``t_ref``."""
        # Check before touching any row: a flow from a far-off time, or huge values, would
        # overflow to inf and poison the state for good.
        if not math.isfinite(t):
            raise ConfigError(f"flow time must be finite, got {t!r}")
        # No rebase here: t may come from a peer; only our own clock (state) moves t_ref.
        dx = np.asarray(flow.dx, dtype=np.float64)
        dz = np.asarray(flow.dz, dtype=np.float64)
        if dx.shape != (self.dim,) or dz.shape != (self.dim,):
            dx, dz = np.broadcast_to(dx, (self.dim,)), np.broadcast_to(dz, (self.dim,))
        a = 0.5 * (dx + dz)
        d = 0.5 * (dx - dz) * decay(self.eta, self._t_ref - t)
        # One reduction for the check: any inf or nan makes the sum inf or nan.
        if not math.isfinite(float(a.sum() + d.sum())):
            raise ConfigError(
                f"flow at t={t!r} is not finite once mixed to t_ref={self._t_ref!r}; refused"
            )
        return a, d
