"""Does a live run's error curve agree with the simulator? (the check behind lambda*)

The exact simulator (:func:`gossip.sim.simulator.simulate`, contract C1) gives, for the same
graph, algorithm and initial values, the distribution of the error at every t. A live run
agrees with it when its measured error stays inside the simulator's 5%-95% band at (almost)
every measured t: the cluster then runs the continuized process itself, whatever its rate.

The measured points are estimates (reports are mixed forward to a common t without the jumps
of the last report period, see :mod:`coordinator.figures.metrics`), so the check skips the start-up
(``t < t_min``).

**One run is judged against the model's own runs, not against a fixed share of points.** An
error curve is strongly correlated in time: a run that is unlucky early stays off the band for
a long stretch. Measured with the exact simulator itself (400 runs against a band of 100),
only 81% of the model's runs on line:30 (ARG, onehot) have 80% of their points inside the
5-95% band, 71% have 90%, and 8% of grid:4x4's runs have less than 60%. A fixed share would
fail a perfect cluster that often. So the simulator also draws ``null_runs`` more runs,
independent of the band's, and :class:`Agreement` places the live run among them (its
percentiles, :attr:`Agreement.p_inside` and :attr:`Agreement.p_offset`):
:meth:`Agreement.typical` says whether the live run is one the model itself produces, at a
chosen false-alarm rate, on the two things a timing fault changes: the share of points inside
the band, and the offset from the simulator's median (a cluster that falls behind drifts above
it).

**A training run** (:func:`training_agreement`) is judged by the same rule on its test error
``1 - accuracy`` at the live grid times, among runs of the training simulator
(:func:`gossip.train.trainer.run_training`) of the same settings: a cluster whose nodes take
fewer gradient steps, or mix less, than the model says lags it, and its test error sits above
the median.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.coordinator.figures.records import ErrorPoint
from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.topology import Topology
from continuized.gossip.model.algorithms import GossipParams

__all__ = [
    "Agreement",
    "Band",
    "band_agreement",
    "optimization_agreement",
    "training_agreement",
]


@dataclass(frozen=True, slots=True)
class Agreement:
    """Measured points against the simulator's band.

    Attributes
    ----------
    t : ndarray
        The measured times (``t >= t_min``), sorted, unique.
    error : ndarray
        The measured errors at ``t``.
    low, median, high : ndarray
        The simulator's quantiles at ``t``.
    inside : float
        Fraction of points with ``low <= error <= high``.
    log_ratio_median : float
        Median of ``log10(error / median)``: the typical offset from the simulator's median
        (0 for a perfect agreement; > 0 means the cluster is slower).
    p_inside : float
        The share of the model's own runs (the null runs) with no more of their points inside
        the band than the live run, counting the live run itself (a Monte Carlo p-value:
        at least ``1 / (null runs + 1)``; NaN without null runs).
    p_offset : float
        The same, two-sided, for ``log_ratio_median``: twice the smaller share of null runs at
        least as far on the same side of the median as the live run (at most 1).
    """

    t: NDArray[np.float64]
    error: NDArray[np.float64]
    low: NDArray[np.float64]
    median: NDArray[np.float64]
    high: NDArray[np.float64]
    inside: float
    log_ratio_median: float
    p_inside: float = float("nan")
    p_offset: float = float("nan")

    def typical(self, alpha: float = 0.005) -> bool:
        """True if the live run is one the model produces: neither its share of points inside
        the band nor its offset is rarer than ``alpha`` among the model's own runs.

        A cluster that runs the model exactly fails this at most about ``2 * alpha`` of the
        time. Without null runs, it falls back on ``inside >= 0.8``.
        """
        if not (0.0 < alpha < 1.0):
            raise ConfigError(f"alpha must be in (0, 1), got {alpha!r}")
        if np.isnan(self.p_inside) or np.isnan(self.p_offset):
            return self.inside >= 0.8
        return bool(self.p_inside >= alpha and self.p_offset >= alpha)

    def verdict(self) -> str:
        """One line: the share inside, the offset, and where they stand among the model's runs."""
        return (
            f"{self.inside:.0%} of {len(self.t)} points inside the band (p = {self.p_inside:.3f} "
            f"among the model's runs), median offset {self.log_ratio_median:+.2f} decades "
            f"(p = {self.p_offset:.3f})"
        )


def band_agreement(
    history: Sequence[ErrorPoint],
    topology: Topology,
    params: GossipParams,
    initial: NDArray[np.float64],
    *,
    runs: int = 200,
    seed: int = 0,
    t_min: float = 0.0,
    floor: float = 0.0,
    quantiles: tuple[float, float] = (0.05, 0.95),
    null_runs: int = 0,
) -> Agreement:
    """Compare ``history`` with the simulator's band for the same run.

    Parameters
    ----------
    history : sequence of ErrorPoint
        The live run's measured points.
    topology, params, initial
        The run's graph, parameters and initial values (``(n,)`` or ``(n, dim)``).
    runs, seed : int
        Simulator runs for the band, and their seed.
    null_runs : int
        More simulator runs (seed ``seed + 1``, independent of the band's) to place the live
        run among (:attr:`Agreement.p_inside`, :meth:`Agreement.typical`); 0: none.
    t_min : float
        Ignore points before this t (start-up).
    floor : float
        Ignore points whose error is below ``floor`` (after eps, where the cluster stops).
    quantiles : (float, float)
        The band.
    """
    t_arr, err = _measured(history, t_min, floor)
    if not t_arr.size:
        return _empty()
    from continuized.gossip.sim.simulator import simulate

    values = np.asarray(initial, dtype=np.float64)
    band = simulate(topology, params, values, t_arr, runs, seed).errors
    null = (
        simulate(topology, params, values, t_arr, null_runs, seed + 1).errors if null_runs else None
    )
    return Band.from_runs(t_arr, band, quantiles, null).judge(err)


def optimization_agreement(
    history: Sequence[ErrorPoint],
    topology: Topology,
    problems: Any,
    dual: Any,
    *,
    runs: int = 100,
    seed: int = 0,
    t_min: float = 0.0,
    floor: float = 0.0,
    quantiles: tuple[float, float] = (0.05, 0.95),
    null_runs: int = 0,
    workers: int = 1,
) -> Agreement:
    """:func:`band_agreement` for an optimization run: its ``sum_v |x_v - x*|^2`` against
    the optimization simulator's band (``gossip.dual.simulate.simulate_optimization``, on
    ``workers`` processes) for the same graph, problems (``ProblemSet``) and dual parameters
    (``DualParams``)."""
    t_arr, err = _measured(history, t_min, floor)
    if not t_arr.size:
        return _empty()
    from continuized.gossip.dual.simulate import simulate_optimization

    band = simulate_optimization(
        topology, problems, dual, t_arr, runs, seed, workers=workers
    ).errors
    null = (
        simulate_optimization(
            topology, problems, dual, t_arr, null_runs, seed + 1, workers=workers
        ).errors
        if null_runs
        else None
    )
    return Band.from_runs(t_arr, band, quantiles, null).judge(err)


def training_agreement(
    live: Sequence[tuple[float, float]],
    band: Any,
    null: Any,
    quantiles: tuple[float, float] = (0.05, 0.95),
) -> Agreement:
    """Judge a live training run's test accuracy among the simulator's runs of its settings.

    Parameters
    ----------
    live : sequence of (t, accuracy)
        The live run's measured points; those on the simulator's grid, with a known accuracy,
        are judged (the others have no simulated counterpart).
    band, null : TrainingResult
        Two independent sets of the simulator's runs on one grid of t
        (:func:`gossip.train.trainer.run_training`): the band's and the ones to place the live
        curve among.
    quantiles : (float, float)
        The band.

    Returns
    -------
    Agreement
        Of the test error ``1 - accuracy`` (``error``, ``low``, ``median``, ``high``): the
        rule is :class:`Band`'s, the one every live curve is judged by.

    Examples
    --------
    >>> from continuized.gossip.train.scores import TrainingResult
    >>> t = np.arange(0.0, 50.0, 10.0)
    >>> runs = np.array([0.9 - 0.8 * np.exp(-t / s) for s in np.linspace(8, 12, 21)])
    >>> sims = TrainingResult("a2cid2", t, {"accuracy": runs})
    >>> middle = training_agreement(list(zip(t, runs[10])), sims, sims)
    >>> middle.inside, middle.typical(0.2)
    (1.0, True)
    >>> lagging = training_agreement(list(zip(t, runs[10] - 0.05)), sims, sims)  # 5 points below
    >>> lagging.inside, lagging.typical(0.2)
    (0.0, False)
    """
    grid = np.asarray(band.t_grid, dtype=np.float64)
    keep: list[int] = []
    accuracy: list[float] = []
    for t, acc in sorted(live):
        k = int(np.searchsorted(grid, t - 1e-9 * max(1.0, abs(t))))
        on_grid = k < len(grid) and np.isclose(grid[k], t, rtol=1e-9)
        if on_grid and math.isfinite(acc) and (not keep or keep[-1] != k):
            keep.append(k)
            accuracy.append(acc)
    if not keep:
        return _empty()
    index = np.array(keep)
    err = 1.0 - np.array(accuracy, dtype=np.float64)
    runs = 1.0 - np.asarray(band.curves["accuracy"], dtype=np.float64)[:, index]
    others = 1.0 - np.asarray(null.curves["accuracy"], dtype=np.float64)[:, index]
    return Band.from_runs(grid[index], runs, quantiles, others).judge(err)


def _measured(
    history: Sequence[ErrorPoint], t_min: float, floor: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    points = sorted((p.t, p.error) for p in history if p.t >= t_min and p.error >= floor)
    t_list: list[float] = []
    e_list: list[float] = []
    for t, e in points:
        if t_list and t <= t_list[-1]:
            continue  # the simulator wants a strictly increasing grid
        t_list.append(t)
        e_list.append(e)
    return np.array(t_list, dtype=np.float64), np.array(e_list, dtype=np.float64)


def _empty() -> Agreement:
    empty = np.zeros(0, dtype=np.float64)
    return Agreement(empty, empty, empty, empty, empty, 0.0, float("nan"))


@dataclass(frozen=True, slots=True)
class Band:
    """The simulator's band at fixed times, and its null runs' scores: judges many curves.

    :func:`band_agreement` and :func:`optimization_agreement` judge one live run; a
    calibration (``benchmarks/bench_agreement.py``) judges hundreds of the model's own runs
    against one band, which then costs one simulation, not one per run.

    Examples
    --------
    >>> t = np.arange(1.0, 4.0)
    >>> runs = np.outer(2.0 ** np.arange(-5, 6), [1.0, 0.5, 0.25])  # 11 runs, 2x apart
    >>> band = Band.from_runs(t, runs, null=runs)
    >>> middle = band.judge(runs[5])
    >>> middle.inside, middle.log_ratio_median, middle.p_offset
    (1.0, 0.0, 1.0)
    >>> far = band.judge(1000 * runs[5])  # 3 decades above: no null run is that far
    >>> far.inside, round(far.p_offset, 3), far.typical(0.2)
    (0.0, 0.167, False)
    """

    t: NDArray[np.float64]
    low: NDArray[np.float64]
    median: NDArray[np.float64]
    high: NDArray[np.float64]
    null_inside: NDArray[np.float64] | None = None
    null_offset: NDArray[np.float64] | None = None

    @classmethod
    def from_runs(
        cls,
        t: NDArray[np.float64],
        errors: NDArray[np.float64],
        quantiles: tuple[float, float] = (0.05, 0.95),
        null: NDArray[np.float64] | None = None,
    ) -> Band:
        """The ``quantiles`` band of the runs ``errors`` (``(runs, len(t))``), and the scores
        of the ``null`` runs (independent of them) to place a judged curve among."""
        low = np.quantile(errors, quantiles[0], axis=0)
        high = np.quantile(errors, quantiles[1], axis=0)
        median = np.median(errors, axis=0)
        if null is None or not len(null):
            return cls(t, low, median, high)
        scores = np.array([_scores(run, low, median, high) for run in null])
        return cls(t, low, median, high, scores[:, 0], scores[:, 1])

    def judge(self, err: NDArray[np.float64]) -> Agreement:
        """The :class:`Agreement` of the curve ``err`` (errors at :attr:`t`) with the band."""
        t_arr, low, median, high = self.t, self.low, self.median, self.high
        inside, offset = _scores(err, low, median, high)
        null_inside, null_offset = self.null_inside, self.null_offset
        if null_inside is None or null_offset is None:
            return Agreement(t_arr, err, low, median, high, inside, offset)
        count = len(null_inside) + 1  # the judged run counts among the runs it is compared with
        p_inside = (np.count_nonzero(null_inside <= inside) + 1) / count
        if np.isnan(offset):
            p_offset = float("nan")
        else:
            finite = null_offset[np.isfinite(null_offset)]
            above = (np.count_nonzero(finite >= offset) + 1) / (finite.size + 1)
            below = (np.count_nonzero(finite <= offset) + 1) / (finite.size + 1)
            p_offset = min(1.0, 2.0 * min(above, below))
        return Agreement(
            t_arr, err, low, median, high, inside, offset, float(p_inside), float(p_offset)
        )


def _scores(
    err: NDArray[np.float64],
    low: NDArray[np.float64],
    median: NDArray[np.float64],
    high: NDArray[np.float64],
) -> tuple[float, float]:
    """(share of points inside the band, median log10 offset from the median) of one curve."""
    inside = float(np.mean((err >= low) & (err <= high)))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.log10(err / median)
    finite = ratio[np.isfinite(ratio)]
    offset = float(np.median(finite)) if finite.size else float("nan")
    return inside, offset
