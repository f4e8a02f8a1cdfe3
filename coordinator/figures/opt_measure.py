"""The coordinator's measurements of an optimization run, from the nodes' report snapshots.

The coordinator's loop (:mod:`coordinator.run.service`) picks one report per node (a consistent
cut when it can) for gossip and optimization runs alike; for an optimization run these two
functions turn that choice into the run's figures
(:class:`~coordinator.figures.optimization.OptPoint`) and put ``sum_v |x_v - x*|^2`` in place of
gossip's error and the dual sums' drift in place of the mass drift, so that ``--until``, the
progress bar, the metrics file and the dashboard's error curve work unchanged. :func:`exact_measure`
does the same for the exact curve (:mod:`coordinator.figures.exact_curve`), whose samples are the
nodes' duals ``y`` at grid times.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from continuized.coordinator.figures.exact_curve import Measure
from continuized.coordinator.figures.metrics import Estimate, Snapshot
from continuized.coordinator.figures.optimization import OptPoint, OptTracker
from continuized.coordinator.figures.records import FinalResult

__all__ = ["exact_measure", "finish_optimization", "measure_optimization"]


def _point(
    tracker: OptTracker,
    snaps: Sequence[Snapshot],
    at: float,
    wall: float,
    primal_at: bool = False,
) -> OptPoint:
    t = np.array([s.t for s in snaps], dtype=np.float64)
    x = np.array([s.x for s in snaps], dtype=np.float64)
    # A node of another version may not report y: its x then stands in (drift is then moot).
    y = np.array([s.y or s.x for s in snaps], dtype=np.float64)
    z = np.array([s.z for s in snaps], dtype=np.float64)
    return tracker.measure(t, x, y, z, at, wall, primal_at)


def measure_optimization(
    tracker: OptTracker, snaps: Sequence[Snapshot], est: Estimate, wall: float
) -> Estimate:
    """Measure the run at ``est.t`` from one snapshot per node; record the point.

    Returns ``est`` with ``error`` = the tracker's error (``sum_v |x_v - x*|^2``) and
    ``mass_drift_rel`` = the dual sums' drift (absolute: both sums start at 0).
    """
    point = _point(tracker, snaps, est.t, wall)
    tracker.history.append(point)
    return dataclasses.replace(est, error=tracker.error(point), mass_drift_rel=point.dual_drift)


def finish_optimization(
    tracker: OptTracker, snaps: Sequence[Snapshot], final: FinalResult, wall: float
) -> FinalResult:
    """Measure the nodes' final reports at ``final.t``; return the run's exact final result.

    After the stop no node jumps any more, so the dual sums of the final reports, mixed to one
    time, are exact: their drift is the run's whole departure from exact mass conservation.
    ``final.t`` is the stop when the reports can be mixed back to it; the primal is then
    recomputed there from the mixed ``y`` (the nodes' own final ``x`` has drifted since).
    """
    point = _point(tracker, snaps, final.t, wall, primal_at=True)
    tracker.final = point
    x_star = tracker.task.x_star
    return dataclasses.replace(
        final,
        error=tracker.error(point),
        mass_drift_rel=point.dual_drift,
        values=tuple(tuple(float(c) for c in s.x) for s in snaps),  # as the nodes reported
        mean=final.mean if x_star is None else tuple(float(c) for c in x_star),
    )


def exact_measure(tracker: OptTracker) -> Measure | None:
    """The exact curve's measure (:data:`coordinator.figures.exact_curve.Measure`) of an
    optimization run: ``(g, y) -> (error, |sum_v y_v|)``; ``None`` without the coordinator's copy of
    the problems (it cannot turn ``y`` into ``x``).

    ``x_v = grad f_v^*(y_v(g))`` from every node's exact dual at ``g``, and the error is the
    tracker's (:meth:`~coordinator.figures.optimization.OptTracker.error`): ``sum_v |x_v - x*|^2``,
    or the consensus distance without ``x*``. The nodes sample ``y`` only, so the drift is
    ``|sum_v y_v(g)|`` (0 in exact arithmetic), not the reports' ``|sum y| + |sum z|``.
    """
    problems = tracker.task.problems
    if problems is None:
        return None
    x_star = tracker.task.x_star

    def measure(g: float, ys: NDArray[np.float64]) -> tuple[float, float]:
        with np.errstate(over="ignore", invalid="ignore"):
            nodes = np.arange(len(ys), dtype=np.intp)
            x = np.asarray(problems.grad_conjugate(nodes, ys), dtype=np.float64)
            if x_star is not None:
                error = float(np.sum((x - x_star) ** 2))
            else:
                error = float(np.sum((x - x.mean(axis=0)) ** 2))
            return error, float(np.linalg.norm(ys.sum(axis=0)))

    return measure
