"""The test functions of the paper's optimization experiments (the paper's experiments)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from continuized.gossip.errors import ConfigError
from continuized.gossip.optim._checks import FloatArray

__all__ = ["DiagonalQuadratic", "paper_convex", "paper_strongly_convex"]


@dataclass(frozen=True)
class DiagonalQuadratic:
    """``f(x) = 1/2 sum_i h_i (x_i - c_i)^2``, with ``L = max h`` and ``mu = min h``.

    ``f`` and ``grad`` act row-wise, so a ``(runs, d)`` batch of points gives ``(runs,)`` values
    and ``(runs, d)`` gradients.

    Attributes
    ----------
    h : ndarray, shape (d,)
        Curvatures, ``> 0``.
    center : ndarray, shape (d,)
        The minimiser ``x*``; ``f* = 0``.
    """

    h: FloatArray
    center: FloatArray

    def __post_init__(self) -> None:
        if self.h.shape != self.center.shape or self.h.ndim != 1:
            raise ConfigError(
                f"h and center must be 1-D of one shape, got {self.h.shape}, {self.center.shape}"
            )
        if not (np.isfinite(self.h).all() and (self.h > 0).all()):
            raise ConfigError("curvatures h must be finite and > 0")

    @property
    def dim(self) -> int:
        """Dimension ``d``."""
        return int(self.h.size)

    @property
    def L(self) -> float:  # noqa: N802 (the paper's name)
        """Smoothness constant ``max_i h_i``."""
        return float(self.h.max())

    @property
    def mu(self) -> float:
        """Strong convexity constant ``min_i h_i``."""
        return float(self.h.min())

    @property
    def x_star(self) -> FloatArray:
        """The minimiser."""
        return self.center.copy()

    def f(self, x: ArrayLike) -> FloatArray:
        """Return ``f(x)`` (``f* = 0``), one value per row."""
        diff = np.asarray(x, dtype=np.float64) - self.center
        return np.asarray(0.5 * np.sum(self.h * diff * diff, axis=-1), dtype=np.float64)

    def grad(self, x: ArrayLike) -> FloatArray:
        """Return ``grad f(x) = h * (x - c)``, row-wise."""
        return self.h * (np.asarray(x, dtype=np.float64) - self.center)


def paper_convex(d: int = 100) -> DiagonalQuadratic:
    """Return the paper's convex test function ``f(x) = 1/2 sum_{i=1}^{d} (x_i - 1/i)^2 / i^2``.

    ``L = 1`` and ``mu = 1 / d^2`` (``1e-4`` for ``d = 100``: negligible strong convexity).

    Examples
    --------
    >>> q = paper_convex()
    >>> q.dim, q.L, float(q.f(np.zeros(100))) > 0
    (100, 1.0, True)
    """
    i = np.arange(1, d + 1, dtype=np.float64)
    return DiagonalQuadratic(1.0 / i**2, 1.0 / i)


def paper_strongly_convex(mu: float = 1e-2, L: float = 1.0) -> DiagonalQuadratic:
    """Return ``f = mu/2 (x_1 - 1)^2 + 3 mu/2 (x_2 - 1)^2 + L/2 (x_3 - 1)^2``, mu = 1e-2, L = 1.

    Examples
    --------
    >>> q = paper_strongly_convex()
    >>> q.mu, q.L
    (0.01, 1.0)
    """
    return DiagonalQuadratic(np.array([mu, 3.0 * mu, L]), np.ones(3))
