"""The network's exact error curve, assembled from the nodes' traces (pure).

Every node sends, with its reports, its values at the grid times its jumps have made final
(:mod:`gossip.exchange.trace`). Once every node has sent its value at a grid time g, the network's
state at g is known exactly, and so are its error and mass drift there: an
:class:`~coordinator.figures.records.ErrorPoint` of the run itself, not an estimate
(:mod:`coordinator.figures.metrics` mixes reports of different times, missing the jumps between).
These are the points to hold against the simulator (:mod:`coordinator.figures.agreement`), and the
points the run stops on (:mod:`coordinator.run.convergence`). An optimization run's nodes sample
their dual ``y``; its points are the error a ``measure`` makes of them
(:func:`coordinator.figures.opt_measure.exact_measure`).

A node sends its grid times in increasing order, each once, on one connection. So once a
grid time is complete, an earlier one that is not never will be (a node's report was lost, or
a restarted node skipped it): it is dropped. The curve is only kept for a run whose members
never change; after a membership change it stops (:meth:`ExactCurve.stop`). It ends where
the coordinator asked the nodes to stop (:meth:`ExactCurve.end_at`): after that time the clocks
stop one by one, and the nodes' last samples (up to their final reports) describe a network
that no longer runs the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from continuized.coordinator.figures.metrics import estimate
from continuized.coordinator.figures.records import ErrorPoint

__all__ = ["MAX_OPEN", "ExactCurve", "Measure"]

MAX_OPEN = 4096
"""Grid times waiting for some node's value at once; the oldest are dropped past this."""

Measure = Callable[[float, "NDArray[np.float64]"], tuple[float, float]]
"""``(g, values) -> (error, drift)`` of every node's sampled values (shape (n, dim)) at ``g``."""


class ExactCurve:
    """Exact error points at the grid times every node has passed.

    Parameters
    ----------
    initial : array of shape (n, dim)
        Every node's initial value, by id (the mean is theirs).
    measure : Measure or None
        The error and drift of the samples at one grid time; ``None``: averaging's,
        ``sum_v 1/2 |x_v - mean|^2`` and the relative mass drift.

    Examples
    --------
    >>> curve = ExactCurve(np.array([[1.0], [0.0]]))
    >>> curve.add(0, [(0.0, (1.0,)), (5.0, (0.5,))], wall=1.0)
    []
    >>> [(p.t, p.error) for p in curve.add(1, [(0.0, (0.0,)), (5.0, (0.5,))], wall=2.0)]
    [(0.0, 0.25), (5.0, 0.0)]
    >>> curve.end_at(7.0)
    >>> curve.add(0, [(10.0, (0.5,))], wall=3.0), curve.add(1, [(10.0, (0.5,))], wall=3.0)
    ([], [])
    """

    def __init__(self, initial: NDArray[np.float64], measure: Measure | None = None) -> None:
        self._initial = np.asarray(initial, dtype=np.float64)
        self._measure = self._averaging if measure is None else measure
        self._n = len(self._initial)
        self._open: dict[float, dict[int, tuple[float, ...]]] = {}
        self._done = -np.inf  # the latest complete grid time
        self.last: ErrorPoint | None = None  # the latest complete point (the state keeps them)
        self.completed = 0  # grid times completed
        self.dropped = 0  # grid times that could never complete
        self.stopped = False
        self.end = np.inf  # no grid time from here on: the run was stopping

    def end_at(self, t: float) -> None:
        """Take no grid time ``>= t`` (the time the coordinator asked the nodes to stop)."""
        self.end = min(self.end, float(t))
        for g in [g for g in self._open if g >= self.end]:
            del self._open[g]

    def stop(self) -> None:
        """Take no more samples (the members changed: the grid times mean another network)."""
        self.stopped = True
        self._open.clear()

    def add(
        self, node: int, samples: Sequence[tuple[float, tuple[float, ...]]], wall: float
    ) -> list[ErrorPoint]:
        """Take one node's samples; return the points they completed, in order of t."""
        if self.stopped or not 0 <= node < self._n:
            return []
        for g, value in samples:
            if g <= self._done or g >= self.end:
                continue  # complete already, or never will be; or after the stop
            self._open.setdefault(g, {})[node] = value
        complete = sorted(g for g, values in self._open.items() if len(values) == self._n)
        if not complete:
            while len(self._open) > MAX_OPEN:  # some node's reports stopped: oldest first
                del self._open[min(self._open)]
                self.dropped += 1
            return []
        out = []
        for g in complete:
            values = self._open.pop(g)
            xs = np.array([values[k] for k in range(self._n)], dtype=np.float64)
            error, drift = self._measure(g, xs)
            out.append(ErrorPoint(g, error, drift, wall))
        self._done = complete[-1]
        self._drop_before(self._done)
        self.last = out[-1]
        self.completed += len(out)
        return out

    def _averaging(self, g: float, xs: NDArray[np.float64]) -> tuple[float, float]:
        est = estimate(np.full(self._n, g), xs, xs, self._initial, 0.0, at=g)
        return est.error, est.mass_drift_rel

    def _drop_before(self, t: float) -> None:
        stale = [g for g in self._open if g < t]
        for g in stale:
            del self._open[g]
        self.dropped += len(stale)
