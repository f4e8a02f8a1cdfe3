"""A live training run's settings, and what the coordinator derives from them.

``gossip up --train MODEL`` names the model, the data and its split, the algorithm and its
rates; the coordinator builds the same :class:`~gossip.train.trainer.TrainingProblem` as
``gossip train`` would (:meth:`Recipe.problem`) and sends each node the specs and the
exchange's constants (:meth:`Recipe.exchange_constants`); each node loads its own shard from
the same specs and draws its own initial model by the simulator's rule (:mod:`node.learner`),
which the coordinator draws too (:meth:`Recipe.initial`), to score the run.

On the wire the algorithms are the gossip machinery with other constants: ``a2cid2`` is the
accelerated pair with ``eta`` and ``c = alpha~`` of :func:`~gossip.train.constants.acid_constants`,
``adpsgd`` pairwise averaging (``eta = c = 0``), ``local`` no communication at all.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError
from continuized.gossip.train.trainer import TrainingProblem, initial_models, make_problem

__all__ = ["INITS", "LIVE_ALGORITHMS", "Recipe"]

LIVE_ALGORITHMS = ("a2cid2", "adpsgd", "local")
"""What a live cluster trains with (``allreduce`` is the simulator's ceiling only)."""

INITS = ("common", "per-node")


@dataclass(frozen=True)
class Recipe:
    """The settings of a live training run (those of ``gossip train``, one algorithm)."""

    model: str
    data: str = "digits"
    split: str = "iid:0"
    algorithm: str = "a2cid2"
    rate_com: float = 1.0
    lr: float = 0.1
    momentum: float = 0.0
    batch_size: int = 16
    seed: int = 0
    init: str = "common"

    def __post_init__(self) -> None:
        if self.algorithm not in LIVE_ALGORITHMS:
            raise ConfigError(
                f"--algorithm {self.algorithm!r} cannot train in a live cluster; valid: "
                + ", ".join(LIVE_ALGORITHMS)
                + " (allreduce runs in gossip train only)"
            )
        if self.init not in INITS:
            raise ConfigError(f"--init must be one of {', '.join(INITS)}, got {self.init!r}")
        if not (np.isfinite(self.rate_com) and self.rate_com > 0):
            raise ConfigError(f"--rate-com must be a finite number > 0, got {self.rate_com!r}")

    @property
    def communicates(self) -> bool:
        """Whether the nodes exchange at all (not ``local``)."""
        return self.algorithm != "local"

    def problem(self, graph: str) -> TrainingProblem:
        """Return the :class:`TrainingProblem` of this run on ``graph`` (the simulator's)."""
        return make_problem(
            graph,
            self.model,
            self.data,
            self.split,
            rate_com=self.rate_com,
            lr=self.lr,
            momentum=self.momentum,
            batch_size=self.batch_size,
            seed=self.seed,
            per_node_init=self.init == "per-node",
        )

    def exchange_constants(self, problem: TrainingProblem) -> tuple[float, float]:
        """Return the exchange's ``(eta, c)``: A²CiD²'s ``(eta, alpha~)``, else ``(0, 0)``."""
        if self.algorithm == "a2cid2":
            return problem.constants.eta, problem.constants.alpha_tilde
        return 0.0, 0.0

    def initial(self, problem: TrainingProblem, nodes: int | None = None) -> NDArray[np.float64]:
        """Return the ``(n, d)`` initial models, those of the simulator's run 0, in float64
        (those of nodes ``0 .. nodes - 1`` only, if given; each node draws its own:
        :func:`~gossip.train.trainer.node_initial`)."""
        rows = initial_models(problem.model, self.seed, 0, problem.per_node_init)
        count = problem.topology.n if nodes is None else nodes
        return np.array(list(itertools.islice(rows, count)), dtype=np.float64)

    def as_dict(self) -> dict[str, Any]:
        """The settings, for the summary and the JSON file."""
        return {
            "model": self.model,
            "data": self.data,
            "split": self.split,
            "algorithm": self.algorithm,
            "rate_com": self.rate_com,
            "lr": self.lr,
            "momentum": self.momentum,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "init": self.init,
        }
