"""A network of general quadratics f_v(x) = 1/2 (x - b_v)^T H_v (x - b_v), for the dual tests.

Independent of gossip.problems on purpose: the conjugate's gradient has a closed form
(``grad f_v^*(y) = b_v + H_v^{-1} y``), so the simulator is checked against exact algebra.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class LocalQuadratic:
    """One node's quadratic."""

    h: FloatArray
    b: FloatArray

    def value(self, x: FloatArray) -> float:
        gap = x - self.b
        return float(0.5 * gap @ self.h @ gap)

    def grad(self, x: FloatArray) -> FloatArray:
        return np.asarray(self.h @ (x - self.b))

    def grad_conjugate(self, y: FloatArray) -> FloatArray:
        return np.asarray(self.b + np.linalg.solve(self.h, y))


class QuadraticNet:
    """n nodes' quadratics, batched like gossip.problems.ProblemSet."""

    def __init__(self, hs: FloatArray, bs: FloatArray) -> None:
        self.hs = np.asarray(hs, dtype=np.float64)
        self.bs = np.asarray(bs, dtype=np.float64)
        self.n, self.dim = self.bs.shape
        self.hinv = np.linalg.inv(self.hs)
        eig = np.linalg.eigvalsh(self.hs)
        self.mu = float(eig.min())
        self.L = float(eig.max())

    @classmethod
    def plain(cls, bs: FloatArray) -> QuadraticNet:
        """f_v = |x - b_v|^2 / 2: gossip averaging of the b_v."""
        n, d = np.shape(bs)
        return cls(np.broadcast_to(np.eye(d), (n, d, d)).copy(), bs)

    @classmethod
    def random(cls, n: int, d: int, kappa: float, seed: int) -> QuadraticNet:
        """Random H_v with eigenvalues in [1, kappa] (both reached), random b_v."""
        rng = np.random.default_rng(seed)
        hs = []
        for v in range(n):
            q, _ = np.linalg.qr(rng.normal(size=(d, d)))
            eig = rng.uniform(1.0, kappa, size=d)
            eig[0], eig[-1] = (1.0, kappa) if v == 0 else (eig[0], eig[-1])
            hs.append(q @ np.diag(eig) @ q.T)
        return cls(np.array(hs), rng.normal(size=(n, d)))

    def local(self, v: int) -> LocalQuadratic:
        return LocalQuadratic(self.hs[v], self.bs[v])

    def grad_conjugate(self, nodes: NDArray[np.intp], y: FloatArray) -> FloatArray:
        return np.asarray(self.bs[nodes] + np.einsum("kij,kj->ki", self.hinv[nodes], y))

    def grad(self, nodes: NDArray[np.intp], x: FloatArray) -> FloatArray:
        return np.asarray(np.einsum("kij,kj->ki", self.hs[nodes], x - self.bs[nodes]))

    def value(self, x: FloatArray) -> float:
        return sum(self.local(v).value(x) for v in range(self.n))

    def values(self, x: FloatArray) -> FloatArray:
        return np.array([self.value(row) for row in x])

    def x_star(self) -> FloatArray:
        rhs = np.einsum("vij,vj->i", self.hs, self.bs)
        return np.asarray(np.linalg.solve(self.hs.sum(axis=0), rhs))
