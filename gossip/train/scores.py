"""What a training run measures on its grid of t, and the curves of many runs.

======================  ==========================================================================
``loss``                training loss (mean cross-entropy over every node's rows) of the average
                        model ``x_bar = (1/n) sum_v x_v``
``accuracy``            test accuracy of the average model
``node_accuracy``       mean over nodes of each node's own test accuracy
``consensus``           consensus distance ``(1/n) sum_v |x_v - x_bar|^2``
======================  ==========================================================================

An accuracy the model cannot give (a user model without ``predict``) is NaN: unknown.

A run *diverged* when its loss curve leaves any finite scale: some grid time's loss is not
finite, or above :data:`DIVERGED_GROWTH` times its loss at the first grid time
(:func:`diverged`). That is the one rule; ``gossip train`` reports it and exits 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.train.models import Model
from continuized.gossip.train.trainset import TrainSet

__all__ = ["DIVERGED_GROWTH", "METRICS", "TrainingResult", "diverged", "evaluate"]

METRICS = ("loss", "accuracy", "node_accuracy", "consensus")

DIVERGED_GROWTH = 1e6
"""A loss this many times its start is a diverged run (a step that fits shrinks the loss)."""

FloatArray = NDArray[np.float64]


def evaluate(model: Model, params: NDArray[Any], data: TrainSet) -> tuple[float, ...]:
    """Return the :data:`METRICS` of the nodes' parameters ``params`` (shape ``(n, d)``)."""
    mean = params.mean(axis=0)
    loss, _ = model.loss_and_grad(mean, (data.train.A, data.train.y))
    # Deviations from node 0 first: identical models then give exactly 0, not the rounding
    # error of their mean (which would draw a floor of 1e-30 on a log scale).
    shifted = (params - params[0]).astype(np.float64)
    spread = shifted - shifted.mean(axis=0)
    consensus = float(np.mean(np.sum(spread * spread, axis=1)))
    # A diverged run reads inf, not NaN: NaN would mean "unknown" and drop out of the quantiles.
    loss = loss if np.isfinite(loss) else float("inf")
    consensus = consensus if np.isfinite(consensus) else float("inf")
    guess = model.predict(mean, data.test.A)
    if guess is None:
        return loss, float("nan"), float("nan"), consensus
    accuracy = float(np.mean(guess == data.test.y))
    per_node = [np.mean(model.predict(p, data.test.A) == data.test.y) for p in params]
    return loss, accuracy, float(np.mean(per_node)), consensus


def diverged(loss: NDArray[np.float64]) -> bool:
    """Whether one run's loss curve (on its grid of t) diverged: a loss that is not finite, or
    above ``DIVERGED_GROWTH`` times the first one.

    Examples
    --------
    >>> diverged(np.array([2.3, 0.5, 0.1])), diverged(np.array([2.3, 40.0, np.inf]))
    (False, True)
    >>> diverged(np.array([2.3, 5e112]))
    True
    """
    loss = np.asarray(loss, dtype=np.float64)
    if not np.isfinite(loss).all():
        return True
    return bool(np.any(loss > DIVERGED_GROWTH * abs(loss[0])))


@dataclass(frozen=True, eq=False)
class TrainingResult:
    """One algorithm's curves: ``curves[metric]`` has shape ``(runs, len(t_grid))``."""

    algorithm: str
    t_grid: FloatArray
    curves: dict[str, FloatArray]
    params: dict[str, float] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        """Number of runs."""
        return int(self.curves["loss"].shape[0])

    def median(self, metric: str) -> FloatArray:
        """Median over runs, at every grid time (NaN where every run is NaN)."""
        return _nan_quantile(self.curves[metric], 0.5)

    def band(self, metric: str, low: float = 0.05, high: float = 0.95) -> tuple[FloatArray, ...]:
        """The ``low`` and ``high`` quantiles over runs, at every grid time."""
        return _nan_quantile(self.curves[metric], low), _nan_quantile(self.curves[metric], high)

    def first_time(self, metric: str, target: float, above: bool) -> list[float | None]:
        """Each run's first grid time with ``metric >= target`` (``above``) or ``<= target``.

        None for a run that never gets there.
        """
        out: list[float | None] = []
        for row in self.curves[metric]:
            hits = np.flatnonzero(row >= target if above else row <= target)
            out.append(float(self.t_grid[hits[0]]) if hits.size else None)
        return out

    def settled_time(self, metric: str, target: float) -> list[float | None]:
        """Each run's first grid time from which ``metric <= target`` holds to the horizon.

        None for a run above ``target`` at its last grid time. Unlike :meth:`first_time` a
        curve that starts below and rises (the consensus of a common start) is not counted at
        its start.
        """
        out: list[float | None] = []
        for row in self.curves[metric]:
            above = np.flatnonzero(~(row <= target))  # NaN counts as not settled
            k = 0 if above.size == 0 else int(above[-1]) + 1
            out.append(float(self.t_grid[k]) if k < row.size else None)
        return out

    def diverged_runs(self) -> list[int]:
        """The runs (by index) whose loss diverged (:func:`diverged`)."""
        return [k for k, row in enumerate(self.curves["loss"]) if diverged(row)]

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures: final median (and 5-95% band) of every metric, the params, and
        the diverged runs (``diverged_runs``, indices; empty when none did)."""
        final: dict[str, Any] = {}
        for metric in METRICS:
            low, high = self.band(metric)
            final[metric] = {
                "median": float(self.median(metric)[-1]),
                "q05": float(low[-1]),
                "q95": float(high[-1]),
            }
        return {
            "runs": self.runs,
            "params": dict(self.params),
            "final": final,
            "diverged_runs": self.diverged_runs(),
        }


def _nan_quantile(values: FloatArray, q: float) -> FloatArray:
    out = np.full(values.shape[1], np.nan)
    known = ~np.isnan(values).all(axis=0)
    if known.any():
        out[known] = np.nanquantile(values[:, known], q, axis=0)
    return out
