"""One experiment: a graph, the nodes' problems, several optimizers, many runs, one summary.

Shared by ``gossip optimize``, ``gossip reproduce optimization-figure`` and the benchmark.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.dual.baseline import best_dgd_params
from continuized.gossip.dual.engine import BatchProblems
from continuized.gossip.dual.params import DualAlgorithm, DualParams, dual_params
from continuized.gossip.dual.report import algorithm_summary
from continuized.gossip.dual.result import OptimizationResult
from continuized.gossip.dual.simulate import simulate_optimization
from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.spectral import GraphQuantities, graph_quantities
from continuized.gossip.graph.topology import Topology
from continuized.gossip.model.algorithms import check_algorithm

__all__ = ["Experiment", "algorithm_params", "parse_algorithms", "run_experiment"]

FloatArray = NDArray[np.float64]

Progress = Callable[[str, float, float], None]
"""Called with (algorithm, activations done, activations expected)."""


@dataclass(eq=False)
class Experiment:
    """The inputs and results of one experiment."""

    topology: Topology
    quantities: GraphQuantities
    problems: BatchProblems
    x_star: FloatArray
    t_grid: FloatArray
    params: dict[str, DualParams] = field(default_factory=dict)
    results: dict[str, OptimizationResult] = field(default_factory=dict)
    dgd_scores: dict[str, float] = field(default_factory=dict)

    def summary(self, eps: float, **extra: Any) -> dict[str, Any]:
        """Return the JSON-ready summary: ``x_star``, every parameter, per-algorithm figures.

        Under ``algorithms.<name>``: ``t_eps`` (first grid time at which the median of
        ``sum_v |x_v - x*|^2`` is ``<= eps``), the final median and mean error, gap and
        consensus, the bound's constant and the parameters. ``speedup_t_eps`` is
        ``t_eps(cd) / t_eps(acd)`` when both were reached, next to ``theory_factor``
        ``theta_acd / theta_cd``.
        """
        algos = {name: algorithm_summary(r, eps) for name, r in self.results.items()}
        if self.dgd_scores and "dgd" in algos:
            algos["dgd"]["step_search"] = self.dgd_scores
        out: dict[str, Any] = {
            **extra,
            "graph": self.topology.spec,
            "n": self.topology.n,
            "dim": int(self.x_star.size),
            "t_end": float(self.t_grid[-1]),
            "grid_points": int(self.t_grid.size),
            "eps": eps,
            "x_star": self.x_star.tolist(),
            "quantities": self.quantities.as_dict(),
            "algorithms": algos,
        }
        acd, cd = algos.get("acd"), algos.get("cd")
        if acd and cd:
            out["theory_factor"] = self.params["acd"].theta / self.params["cd"].theta
            if acd["t_eps"] and cd["t_eps"] is not None:
                out["speedup_t_eps"] = cd["t_eps"] / acd["t_eps"]
        return out


def parse_algorithms(names: Sequence[str]) -> list[str]:
    """Return the algorithm names, checked and without repeats (ConfigError otherwise)."""
    # The one rule of which algorithm runs which task (an averaging one is refused, not swapped).
    parsed = [check_algorithm(a, problem=True, live=False) for a in names]
    if len(set(parsed)) != len(parsed):
        raise ConfigError(f"an algorithm is given twice: {', '.join(names)}")
    if not parsed:
        raise ConfigError("give at least one algorithm: acd, cd or dgd")
    return parsed


def algorithm_params(
    algorithm: str, quantities: GraphQuantities, problems: BatchProblems
) -> DualParams:
    """Return the dual parameters of ``algorithm`` for this graph and these functions."""
    return dual_params(
        algorithm, quantities.mu_gossip, quantities.r_eff, float(problems.mu), float(problems.L)
    )


def run_experiment(
    topology: Topology,
    problems: BatchProblems,
    algorithms: Sequence[str],
    t_grid: FloatArray,
    runs: int,
    seed: int,
    *,
    workers: int | None = 1,
    estimate: str = "y",
    progress: Progress | None = None,
    quantities: GraphQuantities | None = None,
) -> Experiment:
    """Simulate every algorithm on the same activations (same seed) and collect the results.

    dgd's constant step is searched first (:func:`gossip.dual.baseline.best_dgd_params`).
    """
    q = graph_quantities(topology) if quantities is None else quantities
    star = np.asarray(problems.x_star(), dtype=np.float64)
    exp = Experiment(topology, q, problems, star, np.asarray(t_grid, dtype=np.float64))
    expected = runs * float(exp.t_grid[-1])
    for name in algorithms:
        params = algorithm_params(name, q, problems)
        if params.algorithm is DualAlgorithm.DGD:
            params, exp.dgd_scores = best_dgd_params(
                topology, problems, params, float(exp.t_grid[-1]), seed, star
            )
        exp.params[name] = params

        def report(done: int, name: str = name) -> None:
            if progress is not None:
                progress(name, float(done), expected)

        exp.results[name] = simulate_optimization(
            topology,
            problems,
            params,
            exp.t_grid,
            runs,
            seed,
            report,
            workers=workers,
            estimate=estimate,
            x_star=star,
        )
    return exp
