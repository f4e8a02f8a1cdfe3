"""A user-defined problem: robust (pseudo-Huber) regression, loaded as ``module:callable``.

    f(x) = 1/m sum_i delta^2 (sqrt(1 + (a_i^T x - b_i)^2 / delta^2) - 1) + lam/2 |x|^2

The loss has curvature in ``(0, 1]``, so ``mu = lam`` and ``L = lambda_max(A^T A)/m + lam``.
Run it from the repository root (``gossip`` finds ``examples/`` in the folder it runs from)::

    gossip optimize --problem examples.huber_problem:make --data diabetes --split iid:0

A factory receives the node's own shard (``None`` without data) and its id, and returns any
object with ``dim``, ``mu``, ``L``, ``value``, ``grad`` and ``grad_conjugate``
(:class:`gossip.problems.LocalProblem`).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

from continuized.gossip.datasets import Shard
from continuized.gossip.errors import ConfigError
from continuized.gossip.problems import FloatArray

__all__ = ["PseudoHuber", "make"]


class PseudoHuber:
    """One node's pseudo-Huber regression with an L2 term."""

    def __init__(self, shard: Shard, lam: float = 0.1, delta: float = 1.0) -> None:
        self.A, self.b, self.lam, self.delta = shard.A, shard.b, lam, delta
        self.m = shard.m
        self._L = float(np.linalg.eigvalsh(self.A.T @ self.A)[-1]) / self.m + lam

    @property
    def dim(self) -> int:
        """Number of features."""
        return int(self.A.shape[1])

    @property
    def mu(self) -> float:
        """``lam``: the loss may be flat far from the data."""
        return self.lam

    @property
    def L(self) -> float:  # noqa: N802 (the paper's name)
        """``lambda_max(A^T A)/m + lam``: the loss's curvature is at most 1."""
        return self._L

    def value(self, x: FloatArray) -> float:
        """``f(x)``."""
        r = (self.A @ x - self.b) / self.delta
        loss = self.delta**2 * (np.sqrt(1.0 + r * r) - 1.0)
        return float(loss.mean()) + 0.5 * self.lam * float(x @ x)

    def grad(self, x: FloatArray) -> FloatArray:
        """``1/m A^T (r / sqrt(1 + r^2 / delta^2)) + lam x``."""
        r = self.A @ x - self.b
        psi = r / np.sqrt(1.0 + (r / self.delta) ** 2)
        return np.asarray(self.A.T @ psi / self.m + self.lam * x, dtype=np.float64)

    def grad_conjugate(self, y: FloatArray) -> FloatArray:
        """``argmin_x f(x) - <x, y>`` numerically (L-BFGS; slow but generic)."""
        res = minimize(
            lambda x: self.value(x) - float(x @ y),
            np.zeros(self.dim),
            jac=lambda x: self.grad(x) - y,
            method="L-BFGS-B",
            options={"gtol": 1e-12, "ftol": 0.0, "maxiter": 10_000},
        )
        return np.asarray(res.x, dtype=np.float64)


def make(shard: Shard | None, node: int) -> PseudoHuber:
    """The factory named on the command line: node ``node``'s problem on its own shard."""
    if shard is None:
        raise ConfigError(f"examples.huber_problem needs data (node {node} has no shard)")
    return PseudoHuber(shard)
