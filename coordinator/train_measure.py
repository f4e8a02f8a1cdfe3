"""A live training run's figures: the average model's test accuracy and loss, and the consensus.

The nodes' traces give the network's exact parameters at the grid times every node has passed
(:mod:`coordinator.exact_curve`), one grid time per report period; at each, the coordinator
scores the average model ``xbar = (1/n) sum_v x_v`` with the same function as the simulator
(:func:`gossip.train.scores.evaluate`): the loss on the training rows, the accuracy on the
held-out test rows, the mean of the nodes' own accuracies and the consensus distance
``(1/n) sum_v |x_v - xbar|^2``. The final reports give the same figures once more, exactly, at
the end. Where no grid time completed, the figures are unknown (``None``), never guessed.

The cost stays bounded: a training node reports (and samples its trace) at most every
:data:`coordinator.config.TRAINING_REPORT_PERIOD` seconds, longer for a model whose reports
would pass :data:`REPORT_BYTES_PER_S` over all nodes (:func:`report_period`), and scoring one
grid time is one forward pass per node on the test rows.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from coordinator.exact_curve import Measure
from coordinator.metrics import estimate

if TYPE_CHECKING:  # the trainer's imports take a second: a gossip run does not pay them
    from gossip.train.recipe import Recipe
    from gossip.train.trainer import TrainingProblem

__all__ = ["REPORT_BYTES_PER_S", "TrainPoint", "TrainTracker", "report_period"]

REPORT_BYTES_PER_S = 4_000_000
"""The reports' bytes per second over all the nodes of a training run, at the most."""

_BYTES_PER_FLOAT = 20  # a float in a JSON report, with its separator
_VECTORS_PER_REPORT = 4  # x, z, the initial model and one trace sample


def report_period(n: int, dim: int, least: float) -> float:
    """Return the seconds between two reports of each of ``n`` training nodes of ``dim``
    parameters: ``least``, or more if the reports would pass :data:`REPORT_BYTES_PER_S`.

    Examples
    --------
    >>> report_period(8, 4810, 2.0)
    2.0
    >>> round(report_period(16, 100_000, 2.0), 1)
    32.0
    """
    per_report = _VECTORS_PER_REPORT * dim * _BYTES_PER_FLOAT
    return max(least, n * per_report / REPORT_BYTES_PER_S)


@dataclass(frozen=True, slots=True)
class TrainPoint:
    """The figures of the network at one grid time ``t`` (units of t: gradient steps)."""

    t: float
    loss: float
    accuracy: float
    node_accuracy: float
    consensus: float
    wall: float

    def as_list(self) -> list[float]:
        """``[t, loss, accuracy, node_accuracy, consensus, wall]`` (NaN as None in JSON)."""
        return [self.t, self.loss, self.accuracy, self.node_accuracy, self.consensus, self.wall]


class TrainTracker:
    """The run's recipe and problem, its scored points, and the ``--until-accuracy`` target.

    Parameters
    ----------
    recipe : Recipe
        The run's settings.
    problem : TrainingProblem
        The coordinator's copy of the model and the data (its test rows are scored).
    target : float or None
        Stop once the average model's test accuracy reaches it (``--until-accuracy``).
    """

    def __init__(
        self, recipe: Recipe, problem: TrainingProblem, target: float | None = None
    ) -> None:
        self.recipe, self.problem, self.target = recipe, problem, target
        self.points: list[TrainPoint] = []
        self.final: TrainPoint | None = None
        self.t_target: float | None = None  # the first grid time at or above the target

    def score(self, t: float, xs: NDArray[np.float64]) -> TrainPoint:
        """Score every node's parameters ``xs`` (shape ``(n, d)``) at ``t``."""
        from gossip.train.scores import evaluate

        with np.errstate(over="ignore", invalid="ignore"):
            loss, accuracy, node_accuracy, consensus = evaluate(
                self.problem.model, xs, self.problem.data
            )
        return TrainPoint(t, loss, accuracy, node_accuracy, consensus, time.time())

    def measure(self, initial: NDArray[np.float64]) -> Measure:
        """The exact curve's measure: averaging's error and drift, and a scored point."""

        def measure(g: float, xs: NDArray[np.float64]) -> tuple[float, float]:
            point = self.score(g, xs)
            self.points.append(point)
            if self.target is not None and self.t_target is None and point.accuracy >= self.target:
                self.t_target = g
            n = len(xs)
            est = estimate(np.full(n, g), xs, xs, initial, 0.0, at=g)
            return est.error, est.mass_drift_rel

        return measure

    def finish(self, t: float, values: NDArray[np.float64]) -> None:
        """Score the final states (every node's final report, mixed to ``t``)."""
        self.final = self.score(t, values)

    @property
    def latest(self) -> TrainPoint | None:
        """The final point once known, else the latest of the curve (``None``: unknown)."""
        if self.final is not None:
            return self.final
        return self.points[-1] if self.points else None

    def summary(self) -> dict[str, Any]:
        """The figures for the summary and the JSON file (``None``: unknown)."""
        last = self.latest

        def known(value: float | None) -> float | None:
            return None if value is None or math.isnan(value) else value

        return {
            **self.recipe.as_dict(),
            "dim": int(self.problem.initial(0, 0).shape[1]),
            "t": None if last is None else last.t,
            "final_exact": self.final is not None,
            "accuracy": None if last is None else known(last.accuracy),
            "node_accuracy": None if last is None else known(last.node_accuracy),
            "loss": None if last is None else known(last.loss),
            "consensus": None if last is None else known(last.consensus),
            "until_accuracy": self.target,
            "t_to_accuracy": self.t_target,
            "points": len(self.points),
        }

    def as_dict(self, limit: int | None = None) -> dict[str, Any]:
        """The summary and the scored points (the latest ``limit``), for the dashboard."""
        points = self.points if limit is None else self.points[-limit:]
        return {**self.summary(), "curve": [p.as_list() for p in points]}
