"""Least squares under pure multiplicative noise: R^2 and kappa~ of the paper's section 5.

For ``f(x) = E[(b - <x, a>)^2] / 2`` with one sampled data point per step, the stochastic
gradient is ``g(x, (a, b)) = -(b - <x, a>) a``. In the noiseless case (``b = <x*, a>`` almost
surely) it vanishes at the optimum: the noise is purely multiplicative. With ``H = E[a a^T]``:

* ``R^2`` is the smallest number with ``E[|a|^2 a a^T] <= R^2 H``;
* the statistical condition number ``kappa~`` is the smallest with
  ``E[|a|^2_{H^-1} a a^T] <= kappa~ H`` (always ``d <= kappa~ <= kappa = R^2 / mu``);
* ``mu`` is the smallest eigenvalue of ``H``.

Both are largest generalized eigenvalues ``M v = lambda H v``. Continuized acceleration then uses
``gamma = 1 / R^2``, ``eta = 1 / sqrt(kappa kappa~)``, ``gamma' = sqrt(kappa / kappa~) / R^2``
and converges like ``exp(-t / sqrt(kappa kappa~))``, against ``exp(-t / kappa)`` for SGD: pass
``L=R2, mu=mu, kappa_tilde=kappa_tilde`` to :func:`gossip.optim.continuized_nesterov`.

Example on a noiseless regression::

    >>> from continuized.gossip.optim import continuized_nesterov
    >>> problem = noiseless_regression(n_samples=200, dim=5, seed=0)
    >>> c = problem.constants()
    >>> res = continuized_nesterov(problem.oracle(), np.zeros(5), L=c.R2, mu=c.mu,
    ...                            kappa_tilde=c.kappa_tilde, n_steps=3000, seed=1)
    >>> bool(np.linalg.norm(res.x - problem.x_star) < 1e-3)
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike

from continuized.gossip.errors import ConfigError
from continuized.gossip.optim._checks import FloatArray, Seed, as_rng, check_count
from continuized.gossip.optim.noise import StochasticGradient

__all__ = ["LeastSquares", "NoiseConstants", "noise_constants", "noiseless_regression"]


@dataclass(frozen=True)
class NoiseConstants:
    """Constants of least squares under pure multiplicative noise (paper, section 5).

    Attributes
    ----------
    R2 : float
        ``R^2``: smallest with ``E[|a|^2 a a^T] <= R^2 H``; the step is ``gamma = 1 / R^2``.
    kappa_tilde : float
        Statistical condition number: smallest with ``E[|a|^2_{H^-1} a a^T] <= kappa~ H``.
    mu : float
        Smallest eigenvalue of ``H = E[a a^T]`` (strong convexity of ``f``).
    """

    R2: float
    kappa_tilde: float
    mu: float

    @property
    def kappa(self) -> float:
        """Condition number ``kappa = R^2 / mu``."""
        return self.R2 / self.mu

    @property
    def eta(self) -> float:
        """Mixing rate ``1 / sqrt(kappa kappa~)`` (also the convergence rate, per unit of t)."""
        return 1.0 / math.sqrt(self.kappa * self.kappa_tilde)

    @property
    def gamma(self) -> float:
        """Step of ``x``, ``1 / R^2``."""
        return 1.0 / self.R2

    @property
    def gamma_prime(self) -> float:
        """Step of ``z``, ``sqrt(kappa / kappa~) / R^2``."""
        return math.sqrt(self.kappa / self.kappa_tilde) / self.R2


def _weights(n: int, weights: ArrayLike | None) -> FloatArray:
    if weights is None:
        return np.full(n, 1.0 / n)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ConfigError(f"weights must be {n} finite non-negative numbers with a positive sum")
    return np.asarray(w / w.sum(), dtype=np.float64)


def noise_constants(a: ArrayLike, weights: ArrayLike | None = None) -> NoiseConstants:
    """Compute ``R^2``, ``kappa~`` and ``mu`` for points ``a_i`` drawn with probabilities ``w``.

    Parameters
    ----------
    a : array_like, shape (n, d)
        The feature vectors (one per row); the law of ``a`` is the (weighted) empirical law.
    weights : array_like, shape (n,), optional
        Sampling probabilities (normalised); uniform by default.

    Returns
    -------
    NoiseConstants

    Raises
    ------
    ConfigError
        If ``a`` is not a finite 2-D array, or ``H = E[a a^T]`` is singular (``f`` is then not
        strongly convex and ``kappa~`` is infinite).

    Examples
    --------
    >>> c = noise_constants(np.eye(3))  # coordinate sampling: a = e_i with probability 1/3
    >>> round(c.R2, 12), round(c.kappa_tilde, 12), round(c.mu, 12)
    (1.0, 3.0, 0.333333333333)
    """
    A = np.asarray(a, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] == 0 or not np.isfinite(A).all():
        raise ConfigError(
            f"a must be a finite 2-D array (n samples, d features), got shape {A.shape}"
        )
    w = _weights(A.shape[0], weights)
    H = (A * w[:, None]).T @ A
    eig_H = np.linalg.eigvalsh(H)
    if eig_H[0] <= 1e-12 * eig_H[-1]:
        raise ConfigError(
            f"H = E[a a^T] is singular (smallest eigenvalue {eig_H[0]:.3g}): the samples do not "
            f"span R^{A.shape[1]}; give more samples than features, in general position"
        )
    sq_norms = np.sum(A * A, axis=1)
    h_norms = np.sum(A * np.linalg.solve(H, A.T).T, axis=1)
    M_R = (A * (w * sq_norms)[:, None]).T @ A
    M_kappa = (A * (w * h_norms)[:, None]).T @ A
    R2 = float(scipy.linalg.eigh(M_R, H, eigvals_only=True)[-1])
    kappa_tilde = float(scipy.linalg.eigh(M_kappa, H, eigvals_only=True)[-1])
    return NoiseConstants(R2=R2, kappa_tilde=kappa_tilde, mu=float(eig_H[0]))


@dataclass(frozen=True)
class LeastSquares:
    """Least squares ``f(x) = 1/(2n) sum_i (b_i - <x, a_i>)^2`` with a one-sample stochastic oracle.

    ``f`` and ``grad`` act row-wise on batches of points.
    """

    a: FloatArray
    b: FloatArray

    def __post_init__(self) -> None:
        if self.a.ndim != 2 or self.b.shape != (self.a.shape[0],):
            raise ConfigError(
                f"a must be (n, d) and b (n,), got shapes {self.a.shape} and {self.b.shape}"
            )

    def f(self, x: ArrayLike) -> FloatArray:
        """Return ``f(x)``, one value per row."""
        residual = self.b - np.asarray(x, dtype=np.float64) @ self.a.T
        return np.asarray(0.5 * np.mean(residual * residual, axis=-1), dtype=np.float64)

    def grad(self, x: ArrayLike) -> FloatArray:
        """Return the exact gradient ``-(1/n) sum_i (b_i - <x, a_i>) a_i``, row-wise."""
        residual = self.b - np.asarray(x, dtype=np.float64) @ self.a.T
        return np.asarray(-(residual @ self.a) / self.a.shape[0], dtype=np.float64)

    def oracle(self) -> StochasticGradient:
        """Return the oracle ``-(b_i - <x, a_i>) a_i`` with ``i`` uniform, drawn per row."""

        def sample(x: FloatArray, rng: np.random.Generator) -> FloatArray:
            i = rng.integers(self.a.shape[0], size=x.shape[:-1])
            rows = self.a[i]
            residual = self.b[i] - np.sum(x * rows, axis=-1)
            return np.asarray(-residual[..., None] * rows, dtype=np.float64)

        return StochasticGradient(sample)

    @property
    def x_star(self) -> FloatArray:
        """A minimiser (least-squares solution)."""
        return np.asarray(np.linalg.lstsq(self.a, self.b, rcond=None)[0], dtype=np.float64)

    def constants(self) -> NoiseConstants:
        """Return ``R^2``, ``kappa~`` and ``mu`` of the data (see :func:`noise_constants`)."""
        return noise_constants(self.a)


def noiseless_regression(n_samples: int, dim: int, seed: Seed = None) -> LeastSquares:
    """Return a noiseless regression: Gaussian ``a_i``, a random ``x*``, ``b_i = <x*, a_i>``.

    The features have scales ``1, 1/2, ..., 1/dim`` so that the problem is ill-conditioned
    (``kappa`` well above ``kappa~``, where acceleration pays).
    """
    n = check_count("n_samples", n_samples, 1)
    d = check_count("dim", dim, 1)
    rng = as_rng(seed)
    scales = 1.0 / np.arange(1, d + 1)
    A = rng.standard_normal((n, d)) * scales
    x_star = rng.standard_normal(d)
    return LeastSquares(A, A @ x_star)
