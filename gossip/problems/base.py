"""The interface between a node's private objective and the optimizers.

Theory of operation
-------------------
Node ``v`` holds a private function ``f_v`` on ``R^d``, ``mu``-strongly convex and ``L``-smooth.
The network minimises ``F(x) = sum_v f_v(x)``. The dual (accelerated) coordinate descent of the
paper (the paper's experiments) never needs ``f_v`` itself at run time, only the gradient of its
convex conjugate

    grad f_v^*(y) = argmin_x  f_v(x) - <x, y>,

which is ``1/mu``-smooth and ``1/L``-strongly convex. A :class:`LocalProblem`
is one node's ``f_v``: a live node builds it from its own shard only. A :class:`ProblemSet`
holds the ``n`` functions at once, for the simulator and the central check: it answers *batched*
queries (``k`` rows at ``k`` possibly repeated nodes in one call) and computes the minimiser
``x*`` of ``F`` centrally.

The default methods of :class:`ProblemSet` loop over :meth:`ProblemSet.local` in Python; the
built-in families (quadratic, ridge, logistic) override them with stacked numpy code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError

if TYPE_CHECKING:
    from continuized.gossip.problems.arrays import ConjugateArrays, GradientArrays

__all__ = ["FloatArray", "ListProblemSet", "LocalProblem", "ProblemSet"]

FloatArray = NDArray[np.float64]


@runtime_checkable
class LocalProblem(Protocol):
    """Node ``v``'s private ``f_v``: ``mu``-strongly convex and ``L``-smooth on ``R^dim``.

    ``mu`` and ``L`` are true bounds: ``mu I <= hess f_v(x) <= L I`` for every ``x``.
    """

    @property
    def dim(self) -> int:
        """Dimension ``d`` of ``x``."""
        ...

    @property
    def mu(self) -> float:
        """Strong convexity constant (``> 0``)."""
        ...

    @property
    def L(self) -> float:  # noqa: N802 (the paper's name)
        """Smoothness constant (``>= mu``)."""
        ...

    def value(self, x: FloatArray) -> float:
        """``f_v(x)`` for ``x`` of shape ``(d,)``."""
        ...

    def grad(self, x: FloatArray) -> FloatArray:
        """``grad f_v(x)``, shape ``(d,)``."""
        ...

    def grad_conjugate(self, y: FloatArray) -> FloatArray:
        """``grad f_v^*(y) = argmin_x f_v(x) - <x, y>``, shape ``(d,)``."""
        ...


class ProblemSet(ABC):
    """The ``n`` nodes' functions, for the simulator and the central check (never a live node).

    Subclasses implement :meth:`local` and the constants; the batched methods below fall back to
    a Python loop over the nodes and are overridden by the built-in families.
    """

    @property
    @abstractmethod
    def n(self) -> int:
        """Number of nodes."""

    @property
    @abstractmethod
    def dim(self) -> int:
        """Dimension ``d`` of ``x``."""

    @property
    @abstractmethod
    def mu(self) -> float:
        """Strong convexity valid for every ``f_v`` (the minimum over nodes)."""

    @property
    @abstractmethod
    def L(self) -> float:  # noqa: N802 (the paper's name)
        """Smoothness valid for every ``f_v`` (the maximum over nodes)."""

    @abstractmethod
    def local(self, v: int) -> LocalProblem:
        """Node ``v``'s function."""

    def grad_conjugate(
        self, nodes: NDArray[np.intp], y: FloatArray, x0: FloatArray | None = None
    ) -> FloatArray:
        """Row ``i``: ``grad f_{nodes[i]}^*(y[i])``; ``y`` of shape ``(k, d)``, nodes may repeat.

        ``x0`` (optional, shape of ``y``) is a guess of the answer; only iterative solvers
        (logistic's Newton) use it, to start there. Closed forms ignore it.
        """
        del x0  # closed forms and user-defined problems have no use for a guess
        ids, rows = self._batch(nodes, y)
        out = np.empty_like(rows)
        for i, v in enumerate(ids):
            out[i] = self.local(int(v)).grad_conjugate(rows[i])
        return out

    def conjugate_arrays(self) -> ConjugateArrays | None:
        """``grad f_v^*`` as plain arrays, for the compiled optimization sweep
        (:mod:`gossip.problems.arrays`); None (the default): only through these methods, so
        the simulator sweeps with numpy."""
        return None

    def gradient_arrays(self) -> GradientArrays | None:
        """``grad f_v`` as plain arrays, for dgd's compiled sweep (:mod:`gossip.problems.arrays`);
        None (the default): only through :meth:`grad`, so dgd sweeps with numpy."""
        return None

    def grad(self, nodes: NDArray[np.intp], x: FloatArray) -> FloatArray:
        """Row ``i``: ``grad f_{nodes[i]}(x[i])``; ``x`` of shape ``(k, d)``, nodes may repeat."""
        ids, rows = self._batch(nodes, x)
        out = np.empty_like(rows)
        for i, v in enumerate(ids):
            out[i] = self.local(int(v)).grad(rows[i])
        return out

    def value(self, x: FloatArray) -> float:
        """``F(x) = sum_v f_v(x)`` for ``x`` of shape ``(d,)``."""
        point = self._point(x)
        return float(sum(self.local(v).value(point) for v in range(self.n)))

    def values(self, x: FloatArray) -> FloatArray:
        """``F`` at each row of ``x`` (shape ``(k, d)``), shape ``(k,)``."""
        rows = self._rows(x)
        return np.array([self.value(row) for row in rows], dtype=np.float64)

    def total_grad(self, x: FloatArray) -> FloatArray:
        """``grad F(x) = sum_v grad f_v(x)`` for ``x`` of shape ``(d,)``."""
        point = self._point(x)
        nodes = np.arange(self.n, dtype=np.intp)
        return np.asarray(self.grad(nodes, np.tile(point, (self.n, 1))).sum(axis=0))

    def x_star(self) -> FloatArray:
        """The minimiser of ``F``, computed centrally (generic: L-BFGS, then a root polish).

        L-BFGS stops once ``F`` stops changing in floating point, which can leave a relative
        gradient of 1e-8 on badly scaled data; solving ``grad F(x) = 0`` from there (scipy's
        ``root``, which never looks at ``F``) brings it down to rounding.
        """
        from scipy.optimize import minimize, root

        x0 = np.zeros(self.dim)
        # L-BFGS only has to get close: 1e-8 of the starting gradient; the root solve polishes.
        gtol = 1e-8 * float(np.abs(self.total_grad(x0)).max())
        res = minimize(
            self.value,
            x0,
            jac=self.total_grad,
            method="L-BFGS-B",
            options={"gtol": gtol, "ftol": 0.0, "maxiter": 10_000},
        )
        best = np.asarray(res.x, dtype=np.float64)
        polished = np.asarray(root(self.total_grad, best, method="hybr", tol=1e-15).x)
        if np.linalg.norm(self.total_grad(polished)) < np.linalg.norm(self.total_grad(best)):
            best = polished
        return np.asarray(best, dtype=np.float64)

    # -- helpers shared by subclasses -------------------------------------------------------------

    def _point(self, x: FloatArray) -> FloatArray:
        point = np.asarray(x, dtype=np.float64)
        if point.shape != (self.dim,):
            raise ConfigError(f"x must have shape ({self.dim},), got {point.shape}")
        return point

    def _rows(self, x: FloatArray) -> FloatArray:
        rows = np.asarray(x, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] != self.dim:
            raise ConfigError(f"x must have shape (k, {self.dim}), got {rows.shape}")
        return rows

    def _batch(self, nodes: NDArray[np.intp], y: FloatArray) -> tuple[NDArray[np.intp], FloatArray]:
        ids = np.asarray(nodes, dtype=np.intp)
        rows = self._rows(y)
        if ids.shape != (rows.shape[0],):
            raise ConfigError(
                f"nodes must have shape ({rows.shape[0]},) (one per row), got {ids.shape}"
            )
        if ids.size and (ids.min() < 0 or ids.max() >= self.n):
            raise ConfigError(f"node ids must be in [0, {self.n}), got {ids.min()}..{ids.max()}")
        return ids, rows


class ListProblemSet(ProblemSet):
    """A :class:`ProblemSet` over any list of :class:`LocalProblem` (e.g. user-defined ones)."""

    def __init__(self, problems: Sequence[LocalProblem]) -> None:
        if not problems:
            raise ConfigError("a problem set needs at least 1 node, got 0 problems")
        dims = {int(p.dim) for p in problems}
        if len(dims) != 1:
            raise ConfigError(f"every node's problem must have one dimension, got {sorted(dims)}")
        self._problems = list(problems)
        self._dim = dims.pop()
        self._mu = min(float(p.mu) for p in problems)
        self._L = max(float(p.L) for p in problems)
        if not (0.0 < self._mu <= self._L < np.inf):
            raise ConfigError(f"need 0 < mu <= L < inf, got mu = {self._mu}, L = {self._L}")

    @property
    def n(self) -> int:
        """Number of nodes."""
        return len(self._problems)

    @property
    def dim(self) -> int:
        """Dimension ``d`` of ``x``."""
        return self._dim

    @property
    def mu(self) -> float:
        """Minimum over nodes of ``mu``."""
        return self._mu

    @property
    def L(self) -> float:  # noqa: N802 (the paper's name)
        """Maximum over nodes of ``L``."""
        return self._L

    def local(self, v: int) -> LocalProblem:
        """Node ``v``'s function."""
        return self._problems[v]
