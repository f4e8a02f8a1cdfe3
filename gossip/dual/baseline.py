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

from continuized.gossip.dual.compiled import run_dual_block_compiled
from continuized.gossip.dual.engine import BatchProblems, DualBlockSpec, run_dual_block
from continuized.gossip.dual.params import DualAlgorithm, DualParams, dual_params
from continuized.gossip.dual.simulate import sweep_grid, uses_compiled
from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.topology import Topology

__all__ = ["SEARCH_RUNS", "SEARCH_SEED_OFFSET", "STEP_CANDIDATES", "best_dgd_params"]

STEP_CANDIDATES = 10
"""Default number of steps tried: ``1/L, 1/(2L), ..., 2^-(STEP_CANDIDATES-1) / L``."""

SEARCH_RUNS = 4
"""Runs per candidate step."""

SEARCH_SEED_OFFSET = 7919
"""The search runs with seed ``seed + SEARCH_SEED_OFFSET``: independent of the measured runs."""


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
    All candidates are swept in one block (each with its own step), by the compiled sweep
    where it runs (:func:`gossip.dual.simulate.uses_compiled`, ``engine="auto"``), so the
    search costs about one simulation of ``candidates x SEARCH_RUNS`` runs.
    """
    if candidates < 1 or not ratio > 1.0:
        raise ConfigError(f"need candidates >= 1 and ratio > 1, got {candidates!r}, {ratio!r}")
    alphas = ratio ** -np.arange(candidates, dtype=np.float64) / base.L
    star = np.asarray(problems.x_star() if x_star is None else x_star, dtype=np.float64)
    sweep, record = sweep_grid(np.array([t_end], dtype=np.float64))
    first = _dgd(base, float(alphas[0]))
    spec = DualBlockSpec(
        edges=topology.edges,
        probs=topology.probs,
        problems=problems,
        params=first,
        x_star=star,
        f_star=float(problems.value(star)),
        grid=sweep,
        record=record,
        seed=seed + SEARCH_SEED_OFFSET,
        runs=np.tile(np.arange(SEARCH_RUNS, dtype=np.int64), candidates),
        alphas=np.repeat(alphas, SEARCH_RUNS),
    )
    with np.errstate(over="ignore", invalid="ignore"):  # a too large step may diverge
        run = run_dual_block_compiled if uses_compiled("auto", first, problems) else run_dual_block
        final = run(spec).errors[:, -1].reshape(candidates, SEARCH_RUNS)
    medians = np.median(final, axis=1)
    scores = {repr(float(a)): float(m) for a, m in zip(alphas, medians, strict=True)}
    finite = np.flatnonzero(np.isfinite(medians))
    # argmin returns the first (largest) step among ties.
    chosen = alphas[finite[np.argmin(medians[finite])]] if finite.size else alphas[-1]
    return _dgd(base, float(chosen)), scores


def _dgd(base: DualParams, alpha: float) -> DualParams:
    return dual_params(
        DualAlgorithm.DGD,
        base.mu_gossip,
        np.array([base.r_min, base.r_max]),
        base.mu,
        base.L,
        alpha=alpha,
    )
