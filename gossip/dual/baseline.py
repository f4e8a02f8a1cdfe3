"""The primal baseline's constant step, chosen by a small documented search.

Decentralized gradient descent with a constant step ``alpha`` (:mod:`gossip.dual.steps`) trades
speed against accuracy: a larger step converges faster, to a wider neighbourhood of x* (the
heterogeneity of the ``f_v`` biases it, and the random order of the activations keeps it
moving). Theory only says ``alpha <= 1 / L`` keeps each local step a contraction. So the step is
searched: the candidates ``ratio^-k / L`` for ``k = 0 .. candidates - 1`` are each simulated on
``SEARCH_RUNS`` runs (seeded independently of the measured runs) to the same horizon, and the
step with the smallest median final error ``sum_v |x_v(t_end) - x*|^2`` wins (ties: the larger
step). That is the best constant step for the horizon shown; a longer horizon favours a smaller
step. The defaults try ``1/L, 1/(2L), ..., 2^-9 / L``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from gossip.dual.engine import BatchProblems
from gossip.dual.params import DualAlgorithm, DualParams, dual_params
from gossip.dual.simulate import simulate_optimization
from gossip.topology import Topology

__all__ = ["SEARCH_RUNS", "STEP_CANDIDATES", "best_dgd_params"]

STEP_CANDIDATES = 10
"""Default number of steps tried: ``1/L, 1/(2L), ..., 2^-(STEP_CANDIDATES-1) / L``."""

SEARCH_RUNS = 4
"""Runs per candidate step."""

_SEARCH_SEED_OFFSET = 7919  # the search's runs are independent of the runs it is judged on


def best_dgd_params(
    topology: Topology,
    problems: BatchProblems,
    base: DualParams,
    t_end: float,
    seed: int,
    x_star: NDArray[np.float64] | None = None,
    *,
    candidates: int = STEP_CANDIDATES,
    ratio: float = 2.0,
) -> tuple[DualParams, dict[str, float]]:
    """Return dgd's parameters at the best constant step for ``t_end``, and every step's score.

    ``base`` gives the graph and problem constants (any algorithm's parameters for them). The
    scores map ``alpha`` (``repr`` of the float) to the median final error of the search runs.
    """
    scores: dict[str, float] = {}
    best: tuple[float, float] | None = None
    for k in range(candidates):
        alpha = ratio**-k / base.L
        params = _dgd(base, alpha)
        with np.errstate(over="ignore", invalid="ignore"):  # a too large step may diverge
            result = simulate_optimization(
                topology,
                problems,
                params,
                np.array([0.0, t_end]),
                SEARCH_RUNS,
                seed + _SEARCH_SEED_OFFSET,
                x_star=x_star,
            )
        score = float(np.median(result.errors[:, -1]))
        scores[repr(alpha)] = score
        if np.isfinite(score) and (best is None or score < best[1]):
            best = (alpha, score)
    chosen = best[0] if best is not None else ratio ** -(candidates - 1) / base.L
    return _dgd(base, chosen), scores


def _dgd(base: DualParams, alpha: float) -> DualParams:
    return dual_params(
        DualAlgorithm.DGD,
        base.mu_gossip,
        np.array([base.r_min, base.r_max]),
        base.mu,
        base.L,
        alpha=alpha,
    )
