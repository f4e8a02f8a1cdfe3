"""``ridge:LAMBDA``: ``f_v(x) = 1/(2 m_v) |A_v x - b_v|^2 + LAMBDA/2 |x|^2``.

With ``H_v = A_v^T A_v / m_v + LAMBDA I`` and ``c_v = A_v^T b_v / m_v``,
``grad f_v(x) = H_v x - c_v`` and ``grad f_v^*(y) = H_v^{-1} (y + c_v)``; ``mu_v`` and ``L_v``
are the extreme eigenvalues of ``H_v``. A node keeps ``H_v^{-1}`` (from the Cholesky factor
of ``H_v``), so that a live exchange's ``grad f_v^*`` is one matrix-vector product: a live node
calls it twice per exchange, and scipy's ``cho_solve`` cost 77 us a call there, with the
cache as cold as 30 processes on two cores leave it (about a fifth of the exchange's CPU). The
problem set stacks every node's ``H_v^{-1}`` so that a batch is one ``einsum``: the same
matrices, so the simulator and the live node compute the same products.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from scipy.linalg import cho_factor, cho_solve

from continuized.gossip.datasets.shard import Shard
from continuized.gossip.errors import ConfigError
from continuized.gossip.problems.arrays import (
    AffineConjugate,
    AffineGradient,
    affine,
    affine_gradient,
)
from continuized.gossip.problems.base import FloatArray, ProblemSet

__all__ = ["Ridge", "RidgeSet"]

# Relative size below which an eigenvalue of H counts as zero (H is then singular).
_SINGULAR = 1e-12


def _normal_equations(shard: Shard, lam: float) -> tuple[FloatArray, FloatArray, float, float]:
    """``H``, ``c``, ``mu``, ``L`` of one shard; a clear error if ``H`` is singular."""
    if not (np.isfinite(lam) and lam >= 0):
        raise ConfigError(f"ridge: LAMBDA must be a finite number >= 0, got {lam}")
    m = shard.m
    H = shard.A.T @ shard.A / m + lam * np.eye(shard.dim)
    c = shard.A.T @ shard.b / m
    eig = np.linalg.eigvalsh(H)
    mu, L = float(eig[0]), float(eig[-1])
    if mu <= _SINGULAR * max(L, 1.0):
        raise ConfigError(
            f"ridge:{lam:g} on {shard.name} ({m} rows x {shard.dim} features): A^T A is singular "
            f"(smallest eigenvalue {mu:.3g}), so f is not strongly convex; use LAMBDA > 0 "
            "(e.g. ridge:0.1) or give the node more independent rows than features"
        )
    return H, c, mu, L


class Ridge:
    """One node's ridge regression, built from its own shard only."""

    def __init__(self, shard: Shard, lam: float) -> None:
        self.shard, self.lam = shard, float(lam)
        self.H, self.c, self._mu, self._L = _normal_equations(shard, self.lam)
        self.Hinv = np.ascontiguousarray(cho_solve(cho_factor(self.H), np.eye(shard.dim)))

    @property
    def dim(self) -> int:
        """Dimension ``d``."""
        return self.shard.dim

    @property
    def mu(self) -> float:
        """Smallest eigenvalue of ``A^T A / m + LAMBDA``."""
        return self._mu

    @property
    def L(self) -> float:  # noqa: N802 (the paper's name)
        """Largest eigenvalue of ``A^T A / m + LAMBDA``."""
        return self._L

    def value(self, x: FloatArray) -> float:
        """``1/(2m) |A x - b|^2 + LAMBDA/2 |x|^2``."""
        r = self.shard.A @ x - self.shard.b
        return float(r @ r) / (2 * self.shard.m) + 0.5 * self.lam * float(x @ x)

    def grad(self, x: FloatArray) -> FloatArray:
        """``H x - c``."""
        return np.asarray(self.H @ x - self.c, dtype=np.float64)

    def grad_conjugate(self, y: FloatArray) -> FloatArray:
        """``H^{-1} (y + c)``."""
        return np.asarray(self.Hinv @ (np.asarray(y, dtype=np.float64) + self.c))


class RidgeSet(ProblemSet):
    """``n`` ridge problems, one per shard, with stacked ``H_v``, ``H_v^{-1}`` and ``c_v``."""

    def __init__(self, shards: Sequence[Shard], lam: float) -> None:
        self._local = [Ridge(s, lam) for s in shards]
        self._H = np.stack([p.H for p in self._local])
        self._Hinv = np.stack([p.Hinv for p in self._local])
        self._c = np.stack([p.c for p in self._local])
        self._Hsum = self._H.sum(axis=0)
        self._csum = self._c.sum(axis=0)
        # F is quadratic: F(x) = F* + 1/2 (x - x*)^T (sum H) (x - x*), O(d^2) per point, and
        # (unlike expanding |A x - b|^2) exact for the tiny gaps F(x) - F* the figures plot.
        self._star = np.asarray(np.linalg.solve(self._Hsum, self._csum), dtype=np.float64)
        self._f_star = sum(p.value(self._star) for p in self._local)

    @property
    def n(self) -> int:
        """Number of nodes."""
        return len(self._local)

    @property
    def dim(self) -> int:
        """Dimension ``d``."""
        return self._local[0].dim

    @property
    def mu(self) -> float:
        """Minimum over nodes of ``mu_v``."""
        return min(p.mu for p in self._local)

    @property
    def L(self) -> float:  # noqa: N802 (the paper's name)
        """Maximum over nodes of ``L_v``."""
        return max(p.L for p in self._local)

    def local(self, v: int) -> Ridge:
        """Node ``v``'s problem."""
        return self._local[v]

    def grad_conjugate(
        self, nodes: NDArray[np.intp], y: FloatArray, x0: FloatArray | None = None
    ) -> FloatArray:
        """Row ``i``: ``H_{v}^{-1} (y[i] + c_v)``, ``v = nodes[i]``, in one einsum."""
        ids, rows = self._batch(nodes, y)
        out = np.einsum("kij,kj->ki", self._Hinv[ids], rows + self._c[ids])
        return np.asarray(out, dtype=np.float64)

    def conjugate_arrays(self) -> AffineConjugate:
        """``grad f_v^*(y) = H_v^-1 (y + c_v)``: affine."""
        return affine(self._c, self._Hinv)

    def gradient_arrays(self) -> AffineGradient:
        """``grad f_v(x) = H_v x - c_v``: affine."""
        return affine_gradient(self._c, self._H)

    def grad(self, nodes: NDArray[np.intp], x: FloatArray) -> FloatArray:
        """Row ``i``: ``H_v x[i] - c_v``."""
        ids, rows = self._batch(nodes, x)
        out = np.einsum("kij,kj->ki", self._H[ids], rows) - self._c[ids]
        return np.asarray(out, dtype=np.float64)

    def values(self, x: FloatArray) -> FloatArray:
        """``F`` per row, as ``F* + 1/2 (x - x*)^T (sum H) (x - x*)``."""
        dev = self._rows(x) - self._star
        quad = 0.5 * np.einsum("ki,ij,kj->k", dev, self._Hsum, dev)
        return np.asarray(self._f_star + quad, dtype=np.float64)

    def value(self, x: FloatArray) -> float:
        """``F(x)``."""
        return float(self.values(self._point(x)[None, :])[0])

    def total_grad(self, x: FloatArray) -> FloatArray:
        """``(sum H) x - sum c``."""
        return np.asarray(self._Hsum @ self._point(x) - self._csum, dtype=np.float64)

    def x_star(self) -> FloatArray:
        """``(sum_v H_v)^{-1} sum_v c_v``."""
        return self._star.copy()
