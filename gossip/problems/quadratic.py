"""``quadratic``: ``f_v(x) = 1/2 |x - b_v|^2`` (``mu = L = 1``), the averaging problem.

With these functions dual coordinate descent is exactly randomized gossip on the values ``b_v``
(the paper's experiments): ``grad f_v^*(y) = y + b_v`` and ``x* = mean_v b_v``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from continuized.gossip.errors import ConfigError
from continuized.gossip.problems.arrays import (
    AffineConjugate,
    AffineGradient,
    affine,
    affine_gradient,
)
from continuized.gossip.problems.base import FloatArray, ProblemSet

__all__ = ["Quadratic", "QuadraticSet"]


class Quadratic:
    """One node's ``f(x) = 1/2 |x - b|^2``.

    Examples
    --------
    >>> q = Quadratic([1.0, 2.0])
    >>> q.grad_conjugate(np.zeros(2)).tolist()
    [1.0, 2.0]
    """

    def __init__(self, b: ArrayLike) -> None:
        center = np.array(b, dtype=np.float64, ndmin=1)
        if center.ndim != 1 or not np.isfinite(center).all():
            raise ConfigError(f"quadratic: b must be a finite 1-D vector, got {center!r}")
        self.b = center

    @property
    def dim(self) -> int:
        """Dimension ``d``."""
        return int(self.b.size)

    @property
    def mu(self) -> float:
        """Strong convexity: 1."""
        return 1.0

    @property
    def L(self) -> float:  # noqa: N802 (the paper's name)
        """Smoothness: 1."""
        return 1.0

    def value(self, x: FloatArray) -> float:
        """``1/2 |x - b|^2``."""
        diff = np.asarray(x, dtype=np.float64) - self.b
        return 0.5 * float(diff @ diff)

    def grad(self, x: FloatArray) -> FloatArray:
        """``x - b``."""
        return np.asarray(x, dtype=np.float64) - self.b

    def grad_conjugate(self, y: FloatArray) -> FloatArray:
        """``y + b``."""
        return np.asarray(y, dtype=np.float64) + self.b


class QuadraticSet(ProblemSet):
    """``n`` quadratics, the rows of ``values`` (shape ``(n, d)``) as their centres."""

    def __init__(self, values: ArrayLike) -> None:
        centres = np.array(values, dtype=np.float64)
        if centres.ndim == 1:
            centres = centres[:, None]
        if centres.ndim != 2 or centres.shape[0] == 0 or centres.shape[1] == 0:
            raise ConfigError(f"quadratic: values must have shape (n, d), got {centres.shape}")
        if not np.isfinite(centres).all():
            raise ConfigError("quadratic: values must be finite (no NaN or inf)")
        self._b = centres

    @property
    def n(self) -> int:
        """Number of nodes."""
        return int(self._b.shape[0])

    @property
    def dim(self) -> int:
        """Dimension ``d``."""
        return int(self._b.shape[1])

    @property
    def mu(self) -> float:
        """1."""
        return 1.0

    @property
    def L(self) -> float:  # noqa: N802 (the paper's name)
        """1."""
        return 1.0

    def local(self, v: int) -> Quadratic:
        """Node ``v``'s quadratic."""
        return Quadratic(self._b[v])

    def grad_conjugate(
        self, nodes: NDArray[np.intp], y: FloatArray, x0: FloatArray | None = None
    ) -> FloatArray:
        """Row ``i``: ``y[i] + b_{nodes[i]}``."""
        ids, rows = self._batch(nodes, y)
        return rows + self._b[ids]

    def conjugate_arrays(self) -> AffineConjugate:
        """``grad f_v^*(y) = y + b_v``: affine, with ``M_v = I``."""
        return affine(self._b)

    def gradient_arrays(self) -> AffineGradient:
        """``grad f_v(x) = x - b_v``: affine, with ``H_v = I``."""
        return affine_gradient(self._b)

    def grad(self, nodes: NDArray[np.intp], x: FloatArray) -> FloatArray:
        """Row ``i``: ``x[i] - b_{nodes[i]}``."""
        ids, rows = self._batch(nodes, x)
        return rows - self._b[ids]

    def values(self, x: FloatArray) -> FloatArray:
        """``sum_v 1/2 |x_k - b_v|^2`` per row, expanded so the cost is ``O((k + n) d)``."""
        rows = self._rows(x)
        n, total, sq = self.n, self._b.sum(axis=0), float((self._b * self._b).sum())
        return np.asarray(
            0.5 * n * (rows * rows).sum(axis=1) - rows @ total + 0.5 * sq, dtype=np.float64
        )

    def value(self, x: FloatArray) -> float:
        """``sum_v 1/2 |x - b_v|^2``."""
        return float(self.values(self._point(x)[None, :])[0])

    def x_star(self) -> FloatArray:
        """``mean_v b_v``."""
        return np.asarray(self._b.mean(axis=0), dtype=np.float64)
