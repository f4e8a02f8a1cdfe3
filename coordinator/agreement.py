"""Does a live run's error curve agree with the simulator? (the check behind lambda*)

The exact simulator (:func:`gossip.simulator.simulate`, contract C1) gives, for the same
graph, algorithm and initial values, the distribution of the error at every t. A live run
agrees with it when its measured error stays inside the simulator's 5%-95% band at (almost)
every measured t: the cluster then runs the continuized process itself, whatever its rate.

The measured points are estimates (reports are mixed forward to a common t without the jumps
of the last report period, see :mod:`coordinator.metrics`), so the check allows a fraction of
points outside the band and skips the start-up (``t < t_min``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from coordinator.records import ErrorPoint
from gossip.params import GossipParams
from gossip.topology import Topology

__all__ = ["Agreement", "band_agreement", "optimization_agreement"]


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
    """

    t: NDArray[np.float64]
    error: NDArray[np.float64]
    low: NDArray[np.float64]
    median: NDArray[np.float64]
    high: NDArray[np.float64]
    inside: float
    log_ratio_median: float


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
) -> Agreement:
    """Compare ``history`` with the simulator's band for the same run.

    Parameters
    ----------
    history : sequence of ErrorPoint
        The live run's measured points.
    topology, params, initial
        The run's graph, parameters and initial values (``(n,)`` or ``(n, dim)``).
    runs, seed : int
        Simulator runs and seed.
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
    from gossip.simulator import simulate

    result = simulate(topology, params, np.asarray(initial, dtype=np.float64), t_arr, runs, seed)
    return _compare(t_arr, err, result.errors, quantiles)


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
) -> Agreement:
    """:func:`band_agreement` for an optimization run: its ``sum_v |x_v - x*|^2`` against
    the optimization simulator's band (``gossip.dual.simulate.simulate_optimization``) for the
    same graph, problems (``ProblemSet``) and dual parameters (``DualParams``)."""
    t_arr, err = _measured(history, t_min, floor)
    if not t_arr.size:
        return _empty()
    from gossip.dual.simulate import simulate_optimization

    result = simulate_optimization(topology, problems, dual, t_arr, runs, seed)
    return _compare(t_arr, err, result.errors, quantiles)


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


def _compare(
    t_arr: NDArray[np.float64],
    err: NDArray[np.float64],
    errors: NDArray[np.float64],
    quantiles: tuple[float, float],
) -> Agreement:
    low = np.quantile(errors, quantiles[0], axis=0)
    high = np.quantile(errors, quantiles[1], axis=0)
    median = np.median(errors, axis=0)
    inside = float(np.mean((err >= low) & (err <= high)))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.log10(err / median)
    finite = ratio[np.isfinite(ratio)]
    offset = float(np.median(finite)) if finite.size else float("nan")
    return Agreement(t_arr, err, low, median, high, inside, offset)
