"""A node's ledger for a model's parameters: the same sums as :class:`~gossip.model.ledger.Ledger`,
held in numpy arrays, plus the node's own gradient steps.

:class:`~gossip.model.ledger.Ledger` keeps its rows as lists of floats, which is fastest for the
one or few components of a gossiped value and hopeless for the thousands of a model. This
variant keeps the same rows (half-sums ``a`` and half-differences ``d`` at ``t_ref``, one row
per edge and row 0 for the node's own part) as one ``(edges + 1, dim)`` array each, so every
operation is a few vector operations; the exchanger sees the same methods, given and returning
float64 arrays.

A gradient step moves ``x`` and ``z`` (A²CiD²'s ``x~``) by the same ``-step``
(:meth:`ParameterLedger.add_local`). Its half-difference is 0, which the mixing flow leaves
alone, so the step goes into row 0's half-sum at whatever time it is taken: no mixing, and the
sums over the edges, hence the conservation of ``x`` over the network by the jumps, are
untouched. Recovery from the neighbours' ledgers restores the jumps, never the local steps.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from gossip.errors import ConfigError
from gossip.model.jumps import Flow
from gossip.model.ledger import REBASE_SPAN, Ledger
from gossip.model.mixing import Values, decay_value

__all__ = ["ParameterLedger"]

FloatArray = NDArray[np.float64]


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

    def __init__(self, initial: ArrayLike, edges: list[int], eta: float, t0: float = 0.0):
        super().__init__([0.0], edges, eta, t0)  # checks eta and the edges
        x0 = np.atleast_1d(np.asarray(initial, dtype=np.float64)).copy()
        if x0.ndim != 1 or not np.all(np.isfinite(x0)):
            raise ConfigError(f"initial parameters must be a finite vector, got shape {x0.shape}")
        self._dim = int(x0.size)
        rows = len(self.edges) + 1
        self._rows_a = np.zeros((rows, self._dim))
        self._rows_d = np.zeros((rows, self._dim))
        self._rows_a[0] = x0
        self._sum_a = x0.copy()
        self._sum_d = np.zeros(self._dim)
        self._scratch = (np.empty(self._dim), np.empty(self._dim))
        self._initial = x0
        self._initial.setflags(write=False)

    def _rebase(self, t: float) -> None:
        if self.eta > 0 and 2.0 * self.eta * abs(t - self._t_ref) > REBASE_SPAN:
            factor = decay_value(self.eta, t - self._t_ref)
            self._rows_d *= factor
            self._sum_d *= factor
            self._t_ref = t

    def state_values(self, t: float) -> tuple[FloatArray, FloatArray]:
        """Return the node's ``(x, z)`` at time ``t``, as new arrays."""
        if not math.isfinite(t):
            raise ConfigError(f"state time must be finite, got {t!r}")
        self._rebase(t)
        d = self._sum_d * decay_value(self.eta, t - self._t_ref)
        return self._sum_a + d, self._sum_a - d

    def state(self, t: float) -> tuple[FloatArray, FloatArray]:
        """Return the node's ``(x, z)`` at time ``t`` (:meth:`state_values`)."""
        return self.state_values(t)

    def add_values(self, edge: int, dx: Values, dz: Values, t: float, sign: float = 1.0) -> None:
        """Add ``sign * (dx, dz)``, computed at time ``t``, to the ledger of ``edge``.

        Raises
        ------
        LocalError
            ``edge`` is not one of the node's edges.
        ConfigError
            ``t`` or the flow mixed to the reference time is not finite, or a component count
            is not ``dim``; nothing is changed.
        """
        slot = self._slot(edge)
        a, d = self._moved_arrays(dx, dz, t, sign)
        self._rows_a[slot] += a
        self._sum_a += a
        self._rows_d[slot] += d
        self._sum_d += d

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
        self._rows_a[0] -= delta
        self._sum_a -= delta

    def edge_total(self, edge: int, t: float) -> Flow:
        """Return the cumulative flow in through ``edge``, mixed to time ``t``: ``F_e(t)``."""
        slot = self._slot(edge)
        d = self._rows_d[slot] * decay_value(self.eta, t - self._t_ref)
        return Flow(self._rows_a[slot] + d, self._rows_a[slot] - d)

    def set_edge_total(self, edge: int, total: Flow, t: float) -> None:
        """Replace the ledger of ``edge`` with ``total`` taken at time ``t`` (used to recover)."""
        slot = self._slot(edge)
        a, d = self._moved_arrays(total.dx, total.dz, t)
        self._rows_a[slot], self._rows_d[slot] = a, d
        self._sum_a = self._rows_a.sum(axis=0)
        self._sum_d = self._rows_d.sum(axis=0)

    def _moved_arrays(
        self, dx: Values, dz: Values, t: float, sign: float = 1.0
    ) -> tuple[FloatArray, FloatArray]:
        """``sign`` times the flow's half-sum and half-difference moved from ``t`` to
        ``t_ref``, checked, in the ledger's two scratch arrays (valid until the next call)."""
        if not math.isfinite(t):
            raise ConfigError(f"flow time must be finite, got {t!r}")
        fx, fz = np.asarray(dx, dtype=np.float64), np.asarray(dz, dtype=np.float64)
        if fx.shape != (self._dim,) or fz.shape != (self._dim,):
            raise ConfigError(
                f"flow has {fx.size} and {fz.size} components; this ledger's dim is {self._dim}"
            )
        # In place, in buffers kept from call to call: at a million parameters a fresh array
        # per operation costs more in page faults than the arithmetic.
        a, d = self._scratch
        np.add(fx, fz, out=a)
        a *= 0.5 * sign
        np.subtract(fx, fz, out=d)
        d *= 0.5 * sign * decay_value(self.eta, self._t_ref - t)
        # One reduction checks both: a - d = sign * fz (finite when fz is) only when d is.
        if not math.isfinite(float(np.add.reduce(d))) or not math.isfinite(float(np.add.reduce(a))):
            raise ConfigError(
                f"flow at t={t!r} is not finite once mixed to t_ref={self._t_ref!r}; refused"
            )
        return a, d
