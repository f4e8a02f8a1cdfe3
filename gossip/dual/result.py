"""Curves of many runs of a decentralized optimizer, and the theorem's bound they must stay under.

The bound (:func:`bound_constant`, derived in :mod:`gossip.dual.params`) holds for the expected
``sum_v |x_v(t) - x*|^2`` with the primal estimate taken from y (``x_v = grad f_v^*(y_v)``):

* acd: ``(2 / mu) Phi_0 exp(-theta t)``, ``Phi_0 = f(x*) - sum_v f_v(x_v(0))
  + (mu_dual / 2) tr(Y*^T L_P^+ Y*)`` with ``Y*_v = grad f_v(x*)`` and ``x_v(0) = grad f_v^*(0)``
  (the local minimisers);
* cd: ``(2 / mu) (f(x*) - sum_v f_v(x_v(0))) exp(-theta_cd t)``;
* dgd: none (a constant step does not converge to x*).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.dual.engine import BatchProblems
from continuized.gossip.dual.params import DualAlgorithm, DualParams
from continuized.gossip.graph.spectral import DENSE_LIMIT, dense_laplacian
from continuized.gossip.graph.topology import Topology
from continuized.gossip.sim.statistics import ErrorsOverRuns

__all__ = ["OptimizationResult", "bound_constant", "t_eps"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class OptimizationResult(ErrorsOverRuns):
    """Measurements of independent runs on a time grid (units of t).

    Attributes
    ----------
    t_grid : ndarray (points,)
    errors : ndarray (runs, points)
        ``sum_v |x_v(t) - x*|^2``.
    gaps : ndarray (runs, points)
        ``f(mean_v x_v(t)) - f(x*)`` with ``f = sum_v f_v``.
    consensus : ndarray (runs, points)
        ``sum_v |x_v(t) - mean_v x_v(t)|^2``.
    params : DualParams
    x_star : ndarray (d,)
        The minimiser, computed centrally (for the check only).
    f_star : float
        ``f(x*)``.
    bound_factor : float
        The constant C of the theorem's bound ``C exp(-theta t)`` on the mean error (nan: none).
    n : int
        Number of nodes.
    seed : int
    estimate : str
        ``y`` or ``z``: which dual variable the primal estimates came from.
    engine : str
        ``compiled`` (:mod:`gossip.dual.compiled`) or ``numpy`` (:mod:`gossip.dual.engine`):
        which engine swept the runs.
    """

    t_grid: FloatArray
    errors: FloatArray
    gaps: FloatArray
    consensus: FloatArray
    params: DualParams
    x_star: FloatArray
    f_star: float
    bound_factor: float
    n: int
    seed: int
    estimate: str = "y"
    engine: str = "numpy"

    def bound(self) -> FloatArray:
        """The theorem's bound on the mean error, ``C exp(-theta t)`` (nan where there is none)."""
        return self.bound_factor * np.exp(-self.params.theta * self.t_grid)


def t_eps(result: OptimizationResult, eps: float) -> float | None:
    """Return the first grid time at which the median error is ``<= eps``, or None if never."""
    hits = np.flatnonzero(result.median() <= eps)
    return float(result.t_grid[hits[0]]) if hits.size else None


def bound_constant(
    topology: Topology, problems: BatchProblems, params: DualParams, x_star: FloatArray
) -> float:
    """Return C of the bound ``E sum_v |x_v(t) - x*|^2 <= C exp(-theta t)`` (nan for dgd).

    See the module docstring; ``nan`` too for acd on graphs above ``DENSE_LIMIT`` nodes (the
    bound needs ``L_P^+``).
    """
    if params.algorithm is DualAlgorithm.DGD:
        return math.nan
    n, d = problems.n, problems.dim
    local_min = problems.grad_conjugate(np.arange(n, dtype=np.intp), np.zeros((n, d)))
    floor = sum(float(problems.local(v).value(local_min[v])) for v in range(n))
    phi = float(problems.value(x_star)) - floor
    if params.algorithm is DualAlgorithm.ACD:
        if n > DENSE_LIMIT:
            return math.nan
        y_star = np.array([problems.local(v).grad(x_star) for v in range(n)], dtype=np.float64)
        pinv = np.linalg.pinv(dense_laplacian(topology))
        phi += 0.5 * params.mu_dual * float(np.einsum("vd,vw,wd->", y_star, pinv, y_star))
    return 2.0 * max(phi, 0.0) / params.mu
