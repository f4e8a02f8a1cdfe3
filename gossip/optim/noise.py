"""Stochastic gradient oracles: a callable ``oracle(x, rng)`` that draws its noise from ``rng``.

The optimizers accept either a plain gradient ``grad_f(x)`` or a :class:`StochasticGradient`;
only the latter is handed the run's random generator, so a run is reproducible from its seed.
Oracles act row-wise: given a batch of points of shape ``(runs, d)`` they return one stochastic
gradient per row, with independent noise, which is how many runs are simulated at once.

Two noise models of the paper are provided:

* additive noise (appendix on robustness): ``g(x, xi) = grad f(x) + xi`` with ``E xi = 0`` and
  ``E |xi|^2 = sigma^2`` (:class:`AdditiveNoise`);
* pure multiplicative noise (section 5): the noise vanishes at the optimum, for example random
  coordinate sampling ``g(x, i) = d <grad f(x), e_i> e_i`` (:class:`CoordinateSampling`) or
  least squares on one sampled data point (:mod:`gossip.optim.least_squares`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from continuized.gossip.errors import ConfigError
from continuized.gossip.optim._checks import FloatArray

__all__ = ["AdditiveNoise", "CoordinateSampling", "GradientFn", "StochasticGradient"]

GradientFn = Callable[[FloatArray], FloatArray]
OracleFn = Callable[[FloatArray, np.random.Generator], FloatArray]


class StochasticGradient:
    """A stochastic first-order oracle ``g = oracle(x, rng)``, unbiased for ``grad f(x)``.

    Parameters
    ----------
    fn : callable
        ``fn(x, rng) -> g`` with ``g`` of the shape of ``x``; ``x`` is ``(d,)`` for one run or
        ``(runs, d)`` for a batch, and each row must get its own noise.

    Examples
    --------
    >>> oracle = StochasticGradient(lambda x, rng: x + rng.normal(size=x.shape))
    >>> oracle(np.zeros(3), np.random.default_rng(0)).shape
    (3,)
    """

    def __init__(self, fn: OracleFn) -> None:
        self._fn = fn

    def __call__(self, x: FloatArray, rng: np.random.Generator) -> FloatArray:
        """Return one stochastic gradient at ``x`` (one per row for a batch)."""
        return np.asarray(self._fn(x, rng), dtype=np.float64)


class AdditiveNoise(StochasticGradient):
    """Exact gradient plus centred Gaussian noise of covariance ``cov``.

    ``g(x, xi) = grad f(x) + xi`` with ``xi ~ N(0, cov)``, so ``sigma^2 = E |xi|^2 = trace(cov)``.

    Parameters
    ----------
    grad_f : callable
        Exact gradient, row-wise on batches.
    cov : float or array_like
        A variance ``v >= 0`` (covariance ``v I``, the paper uses ``1e-4``) or a ``(d, d)``
        symmetric positive semi-definite covariance matrix.

    Examples
    --------
    >>> noisy = AdditiveNoise(lambda x: x, cov=1e-4)
    >>> g = noisy(np.zeros((1000, 2)), np.random.default_rng(0))
    >>> bool(abs(g.var() - 1e-4) < 1e-5)
    True
    """

    def __init__(self, grad_f: GradientFn, cov: float | ArrayLike) -> None:
        cov_arr = np.array(cov, dtype=np.float64)
        if cov_arr.ndim == 0:
            if not (np.isfinite(cov_arr) and cov_arr >= 0):
                raise ConfigError(f"noise variance must be a finite number >= 0, got {cov!r}")
            self._scale: FloatArray | None = None
            self._std = float(np.sqrt(cov_arr))
        elif cov_arr.ndim == 2 and cov_arr.shape[0] == cov_arr.shape[1]:
            if not np.isfinite(cov_arr).all() or not np.allclose(cov_arr, cov_arr.T):
                raise ConfigError("noise covariance must be a finite symmetric (d, d) matrix")
            eigval, eigvec = np.linalg.eigh(cov_arr)
            if eigval.min() < -1e-12 * max(1.0, float(np.abs(eigval).max())):
                raise ConfigError(
                    "noise covariance must be positive semi-definite, "
                    f"smallest eigenvalue {eigval.min():.3g}"
                )
            # A symmetric square root works for semi-definite matrices, unlike Cholesky.
            self._scale = (eigvec * np.sqrt(np.clip(eigval, 0.0, None))) @ eigvec.T
            self._std = 1.0
        else:
            raise ConfigError(
                f"noise covariance must be a number or a (d, d) matrix, got shape {cov_arr.shape}"
            )
        self.grad_f = grad_f
        self.sigma2 = float(cov_arr * 1.0) if cov_arr.ndim == 0 else float(np.trace(cov_arr))
        super().__init__(self._draw)

    def _draw(self, x: FloatArray, rng: np.random.Generator) -> FloatArray:
        noise = rng.standard_normal(x.shape)
        if self._scale is not None:
            if self._scale.shape[0] != x.shape[-1]:
                raise ConfigError(
                    f"noise covariance is {self._scale.shape[0]}x{self._scale.shape[0]} "
                    f"but the points have dimension {x.shape[-1]}"
                )
            noise = noise @ self._scale
        else:
            noise *= self._std
        return np.asarray(self.grad_f(x), dtype=np.float64) + noise

    def variance(self, d: int) -> float:
        """Return ``sigma^2 = E |xi|^2`` in dimension ``d`` (``d v`` for a variance ``v``)."""
        return self.sigma2 * d if self._scale is None else self.sigma2


class CoordinateSampling(StochasticGradient):
    """Random coordinate gradient ``g(x, i) = d <grad f(x), e_i> e_i`` (pure multiplicative noise).

    It is unbiased and vanishes at the optimum (where ``grad f = 0``), the noiseless setting of
    the paper's section 5. The full gradient is computed and masked, which is fine for tests and
    small ``d``; a real coordinate method would compute one partial derivative.
    """

    def __init__(self, grad_f: GradientFn) -> None:
        self.grad_f = grad_f
        super().__init__(self._draw)

    def _draw(self, x: FloatArray, rng: np.random.Generator) -> FloatArray:
        g = np.asarray(self.grad_f(x), dtype=np.float64)
        d = x.shape[-1]
        picked = rng.integers(d, size=x.shape[:-1])
        mask = np.zeros(x.shape)
        np.put_along_axis(mask, np.asarray(picked)[..., None], float(d), axis=-1)
        return g * mask
