"""A live training run's figures: the average model's test accuracy and loss, and the consensus.

The nodes' traces give the network's exact parameters at the grid times every node has passed
(:mod:`coordinator.figures.exact_curve`), one grid time per report period; at each, the coordinator
scores the average model ``xbar = (1/n) sum_v x_v`` with the same function as the simulator
(:func:`gossip.train.scores.evaluate`): the loss on the training rows, the accuracy on the
held-out test rows, the mean of the nodes' own accuracies and the consensus distance
``(1/n) sum_v |x_v - xbar|^2``. The final reports give the same figures once more, exactly, at
the end. Where no grid time completed, the figures are unknown (``None``), never guessed.

The cost stays bounded: a training node reports (and samples its trace) at most every
:data:`coordinator.run.config.TRAINING_REPORT_PERIOD` seconds, longer for a model whose reports
would pass :data:`REPORT_BYTES_PER_S` over all nodes (:func:`report_period`), and scoring one
grid time is one forward pass per node on the test rows.

**The simulator's band.** The exact simulator of the same settings (``gossip train``'s
:func:`gossip.train.trainer.run_once`) runs the model's own runs on the live run's grid of t,
from the live run's start and with its mini-batches, each with a timing of its own
(:func:`simulate_train_band`, in a child process): their 5/50/95% quantiles of the accuracy,
the loss and the consensus are the dashboard's band, and further, independent runs are what
:func:`coordinator.figures.agreement.training_agreement` places the live accuracy curve among. Its
cost is bounded: the runs times the nodes times the band's last t stay within
:data:`TRAIN_BAND_BUDGET` (:func:`train_grid`), so a long run's band covers its start only;
a larger model's budget is smaller, for the same CPU time (:func:`band_budget`), and where
even two grid points would pass it, fewer runs are simulated (:func:`simulate_in_child`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from continuized.coordinator.figures.exact_curve import Measure
from continuized.coordinator.figures.metrics import estimate
from continuized.gossip.errors import ConfigError, GossipError

if TYPE_CHECKING:  # the trainer's imports take a second: a gossip run does not pay them
    from continuized.coordinator.figures.agreement import Agreement
    from continuized.gossip.train.recipe import Recipe
    from continuized.gossip.train.scores import TrainingResult
    from continuized.gossip.train.trainer import TrainingProblem

__all__ = [
    "BAND_METRICS",
    "LIVE_MAX_DIM",
    "MIN_BAND_RUNS",
    "MQTT_MAX_PAYLOAD",
    "REPORT_BYTES_PER_S",
    "TRAINING_ALPHA",
    "TRAIN_BAND_BUDGET",
    "TRAIN_BAND_LIMIT",
    "TrainBand",
    "TrainPoint",
    "TrainTracker",
    "band_budget",
    "band_plan",
    "report_period",
    "simulate_in_child",
    "simulate_train_band",
    "train_grid",
    "verdict_alpha",
]

TRAIN_BAND_BUDGET = 150_000.0
"""Units of t simulated for a training run's band, summed over its runs and its nodes, at
the most (about a minute of one core for the MLP on digits)."""

BAND_COST_MS = (0.21, 2.9e-5)
"""A simulated node's CPU milliseconds per unit of t: a fixed part, and one per parameter
(measured, A²CiD² on cycle:4 and digits: 0.35 ms for ``mlp:64``'s 4,810 parameters, 1.03 ms
for ``mlp:256:64``'s 33,738 and 2.69 ms for ``mlp:256:256``'s 85,002)."""

MIN_BAND_RUNS = 30
"""The fewest runs the band is drawn from (a third) and the verdict judged among (the rest, at
an alpha of 0.12), when the budget cuts them: fewer judge nothing, and there is no band."""

_BUDGET_DIM = 4_810  # the model TRAIN_BAND_BUDGET was measured on: mlp:64 on digits

TRAIN_BAND_LIMIT = 300.0
"""Seconds the band's child process may take; the run's summary waits for it that long."""

TRAINING_ALPHA = 0.02
"""The p-value under which the summary calls a live accuracy curve atypical
(:meth:`coordinator.figures.agreement.Agreement.typical`; a false alarm at most about ``2 alpha`` of
the time), given enough runs (:func:`verdict_alpha`)."""

BAND_METRICS = ("accuracy", "loss", "consensus")
"""The figures the dashboard draws with the simulator's band."""

_log = logging.getLogger(__name__)

REPORT_BYTES_PER_S = 4_000_000
"""The reports' bytes per second over all the nodes of a training run, at the most."""

_BYTES_PER_FLOAT = 11  # a parameter in a report, packed (gossip.wire.checks: 10.7 bytes)
_VECTORS_PER_REPORT = 4  # x, z, the initial model and one trace sample

MQTT_MAX_PAYLOAD = 268_435_455
"""The largest MQTT packet there is (the protocol's bound, 256 MiB): mosquitto's default
``max_packet_size`` and the clients' own."""

LIVE_MAX_DIM = MQTT_MAX_PAYLOAD // ((_VECTORS_PER_REPORT + 1) * _BYTES_PER_FLOAT)
"""The most parameters a live training run takes: a node's state report, its vectors packed
(and a second trace sample where a period slips), must fit one MQTT packet. 4,880,644."""


def report_period(n: int, dim: int, least: float) -> float:
    """Return the seconds between two reports of each of ``n`` training nodes of ``dim``
    parameters: ``least``, or more if the reports would pass :data:`REPORT_BYTES_PER_S`.

    Examples
    --------
    >>> report_period(8, 4810, 2.0)
    2.0
    >>> round(report_period(16, 100_000, 2.0), 1)
    17.6
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
        from continuized.gossip.train.trainer import node_initial

        self.recipe, self.problem, self.target = recipe, problem, target
        self.dim = int(node_initial(problem.model, recipe.seed, 0, 0, per_node=False).size)
        """The model's parameters."""
        self.points: list[TrainPoint] = []
        self.final: TrainPoint | None = None
        self.t_target: float | None = None  # the first grid time at or above the target
        self.band: TrainBand | None = None  # the simulator's runs (set by the coordinator)
        self.band_status = "off"  # off, pending, ready or "unavailable: <why>"
        self.agreement: Agreement | None = None  # the live accuracy curve among them

    def judge(self) -> Agreement | None:
        """Place the live accuracy curve among the simulator's runs (``None``: no band).

        The rule is :func:`coordinator.figures.agreement.training_agreement`'s; the verdict is kept
        in :attr:`agreement` and goes to the summary.
        """
        if self.band is None:
            return None
        from continuized.coordinator.figures.agreement import training_agreement

        live = [(p.t, p.accuracy) for p in self.points]
        self.agreement = training_agreement(live, self.band.band, self.band.null)
        return self.agreement

    def agreement_summary(self) -> dict[str, Any]:
        """The verdict for the summary: the share of points inside the band, the offset, their
        p-values among the model's own runs, and ``typical`` (``None``: unknown, and why)."""
        ag = self.agreement
        if ag is None or not len(ag.t):
            why = self.band_status if self.band_status != "ready" else "no live point on its grid"
            return {"typical": None, "status": why}
        runs = self.band.band.runs if self.band is not None else 0
        null = self.band.null.runs if self.band is not None else 0
        alpha = verdict_alpha(null)
        return {
            "typical": ag.typical(alpha),
            "alpha": alpha,
            "points": len(ag.t),
            "t_max": float(ag.t[-1]),
            "inside": ag.inside,
            "offset_decades": None if math.isnan(ag.log_ratio_median) else ag.log_ratio_median,
            "p_inside": None if math.isnan(ag.p_inside) else ag.p_inside,
            "p_offset": None if math.isnan(ag.p_offset) else ag.p_offset,
            "runs": runs,
            "null_runs": null,
            "status": "judged",
        }

    def score(self, t: float, xs: NDArray[np.float64]) -> TrainPoint:
        """Score every node's parameters ``xs`` (shape ``(n, d)``) at ``t``."""
        from continuized.gossip.train.scores import evaluate

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
    def diverged(self) -> bool:
        """Whether the loss so far diverged, by the offline rule
        (:func:`gossip.train.scores.diverged`: not finite, or over its growth bound)."""
        from continuized.gossip.train.scores import diverged

        losses = [p.loss for p in self.points] + ([self.final.loss] if self.final else [])
        return bool(losses) and diverged(np.array(losses, dtype=np.float64))

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
            "dim": self.dim,
            "t": None if last is None else last.t,
            "final_exact": self.final is not None,
            "accuracy": None if last is None else known(last.accuracy),
            "node_accuracy": None if last is None else known(last.node_accuracy),
            "loss": None if last is None else known(last.loss),
            "consensus": None if last is None else known(last.consensus),
            "until_accuracy": self.target,
            "t_to_accuracy": self.t_target,
            "points": len(self.points),
            "agreement": self.agreement_summary(),
        }

    def as_dict(self, limit: int | None = None) -> dict[str, Any]:
        """The summary and the scored points (the latest ``limit``), for the dashboard."""
        points = self.points if limit is None else self.points[-limit:]
        return {
            **self.summary(),
            "curve": [p.as_list() for p in points],
            "band_status": self.band_status,
        }


def train_grid(
    step: float,
    n: int,
    runs: int,
    t_end: float = math.inf,
    budget: float = TRAIN_BAND_BUDGET,
) -> NDArray[np.float64]:
    """Return the band's grid: the live grid ``k * step`` from 0 to ``t_end`` (the run's
    timeout), and no further than ``runs * n * t <= budget`` (at least two points).

    Examples
    --------
    >>> train_grid(2.5, 8, 90, t_end=30.0).tolist()[-3:]
    [25.0, 27.5, 30.0]
    >>> train_grid(40.0, 8, 150).tolist()[-1]  # the budget: 150 runs of 8 nodes to t = 120
    120.0
    """
    if not (math.isfinite(step) and step > 0 and n >= 1 and runs >= 1):
        raise ConfigError(f"the band needs step > 0, n >= 1 and runs >= 1; got {step}, {n}, {runs}")
    last = max(1, int(min(t_end, budget / (runs * n)) / step + 1e-9))
    return step * np.arange(last + 1, dtype=np.float64)


def band_budget(dim: int) -> float:
    """Return the band's budget in units of t (runs times nodes times t) for a model of
    ``dim`` parameters: :data:`TRAIN_BAND_BUDGET`, scaled down for a model larger than
    ``mlp:64`` on digits so that it takes about as much CPU (:data:`BAND_COST_MS`).

    Examples
    --------
    >>> band_budget(4_810) == band_budget(100) == TRAIN_BAND_BUDGET
    True
    >>> round(band_budget(85_002), -2)  # mlp:256:256 on digits
    19600.0
    """
    fixed, per_param = BAND_COST_MS
    return TRAIN_BAND_BUDGET * min(
        1.0, (fixed + per_param * _BUDGET_DIM) / (fixed + per_param * dim)
    )


def band_plan(
    step: float, n: int, runs: int, t_end: float, dim: int
) -> tuple[NDArray[np.float64], int]:
    """Return the band's grid (:func:`train_grid`) and its runs for a model of ``dim``
    parameters, within :func:`band_budget`: ``runs``, or fewer where the grid's first two
    points alone would pass the budget (a large model reported on a long period; the verdict's
    alpha then rises, :func:`verdict_alpha`), but not fewer than :data:`MIN_BAND_RUNS` (or
    ``runs``, if fewer were asked for): 0 then, no band.

    Examples
    --------
    >>> grid, runs = band_plan(136.0, 4, 150, 2400.0, 85_002)  # mlp:256:256, 6.8 s at 20/s
    >>> grid.tolist(), runs
    ([0.0, 136.0], 36)
    >>> band_plan(294.0, 4, 150, 2400.0, 167_178)[1]  # mlp:512:256, 14.7 s at 20/s
    0
    """
    budget = band_budget(dim)
    grid = train_grid(step, n, runs, t_end, budget)
    affordable = min(runs, int(budget / (n * grid[-1])))
    return grid, affordable if affordable >= min(runs, MIN_BAND_RUNS) else 0


def verdict_alpha(null_runs: int) -> float:
    """The false-alarm rate the summary judges at: :data:`TRAINING_ALPHA`, or the least at
    which ``null_runs`` runs can fail a curve at all (``2.5 / (null_runs + 1)``).

    A verdict among ``N`` runs has p-values of at least ``1 / (N + 1)`` (``2 / (N + 1)`` for the
    two-sided offset): below that alpha it would pass any curve.

    Examples
    --------
    >>> verdict_alpha(200), round(verdict_alpha(60), 3)
    (0.02, 0.041)
    """
    return max(TRAINING_ALPHA, 2.5 / (null_runs + 1))


@dataclass(frozen=True, eq=False)
class TrainBand:
    """The simulator's runs of a training run's settings on the live grid.

    ``band`` and ``null`` are two independent sets of runs (:func:`simulate_train_band`): the
    first gives the quantiles drawn, the second the runs a live curve is placed among.
    """

    band: TrainingResult
    null: TrainingResult

    @property
    def t(self) -> NDArray[np.float64]:
        """The grid of t."""
        return self.band.t_grid

    def as_dict(self) -> dict[str, Any]:
        """The 5/50/95% quantiles of :data:`BAND_METRICS`, JSON-ready (unknown: ``None``)."""
        out: dict[str, Any] = {"t": self.t.tolist(), "runs": self.band.runs}
        for metric in BAND_METRICS:
            low, high = self.band.band(metric)
            middle = self.band.median(metric)
            out[metric] = {
                name: [_known(v) for v in values]
                for name, values in (("q05", low), ("q50", middle), ("q95", high))
            }
        return out


async def simulate_in_child(tracker: TrainTracker, step: float, runs: int, t_end: float) -> None:
    """Compute the tracker's :class:`TrainBand` in a child process and set it, with its status.

    ``runs`` simulator runs (a third for the band) on the live grid of ``step`` up to ``t_end``
    (:func:`train_grid`, within the model's :func:`band_budget`; fewer runs, 3 at the least,
    where the grid's first two points would pass it); the child is killed after
    :data:`TRAIN_BAND_LIMIT` seconds. Failures are the band's status (``unavailable: <why>``),
    never an exception.
    """
    from continuized.coordinator.machine.offload import offload

    tracker.band_status = "pending"
    started = time.monotonic()
    try:
        asked = runs
        grid, runs = band_plan(step, tracker.problem.topology.n, runs, t_end, tracker.dim)
        if not runs:
            tracker.band_status = (
                f"unavailable: {min(asked, MIN_BAND_RUNS)} runs of this {tracker.dim:,}-parameter "
                f"model to t = {grid[-1]:g} (its first report) would take minutes of CPU"
            )
            return
        band_runs = max(1, runs // 3)
        async with asyncio.timeout(TRAIN_BAND_LIMIT):
            # Nice 10, not 19: the summary's verdict waits for it, and at 19 every other job
            # of a busy machine would come first. The nodes still come first.
            band = await offload(
                10,
                simulate_train_band,
                tracker.problem,
                tracker.recipe.algorithm,
                grid,
                band_runs,
                runs - band_runs,
                tracker.recipe.seed,
            )
    except TimeoutError:
        tracker.band_status = f"unavailable: the simulation took over {TRAIN_BAND_LIMIT:.0f} s"
    except (GossipError, OSError) as exc:
        tracker.band_status = f"unavailable: {exc}"
    else:
        tracker.band, tracker.band_status = band, "ready"
        _log.info(
            "simulator band for the training run: %d runs to t = %g in %.1f s",
            runs,
            band.t[-1],
            time.monotonic() - started,
        )


def simulate_train_band(
    problem: TrainingProblem,
    algorithm: str,
    t_grid: NDArray[np.float64],
    runs: int,
    null_runs: int,
    seed: int,
) -> TrainBand:
    """Simulate ``runs`` and ``null_runs`` runs of ``algorithm`` on ``problem`` at ``t_grid``.

    Every run starts where the live run starts and draws its mini-batches (run 0 of ``seed``,
    :meth:`gossip.train.recipe.Recipe.initial`): they differ from it in their timing only,
    each with the events of its own run (1 to ``runs`` for the band, the next ``null_runs``
    to judge among). The start matters: the MLP (``mlp:16``, lr 0.2, cycle:8) on digits from
    run 0's start trails runs from other starts by up to 0.07 of accuracy between t = 10 and
    t = 30 (medians of 60 runs), more than a cluster that lags a little.

    Blocking and CPU-bound (about 0.3 ms per node and unit of t for the MLP on digits): the
    coordinator runs it in a child process (:func:`coordinator.machine.offload.offload`).
    """
    from continuized.gossip.train.scores import METRICS, TrainingResult
    from continuized.gossip.train.trainer import run_once

    grid = np.asarray(t_grid, dtype=np.float64)

    def simulated(clocks: range) -> TrainingResult:
        stacked = np.stack([run_once(problem, algorithm, grid, seed, 0, clock=k) for k in clocks])
        curves = {m: stacked[:, k, :] for k, m in enumerate(METRICS)}
        return TrainingResult(algorithm, grid, curves)

    return TrainBand(
        simulated(range(1, runs + 1)), simulated(range(runs + 1, runs + null_runs + 1))
    )


def _known(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
