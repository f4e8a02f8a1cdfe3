"""The nodes' reports as they arrive, and the error point they give at a common t.

:class:`ReportBook` is fed every state report the MQTT link delivers
(:meth:`ReportBook.ingest`): it updates the node's :class:`~coordinator.records.NodeView` in the
:class:`~coordinator.state.ClusterState` and keeps the node's last reports. Every metrics period
the coordinator asks it for one :class:`~coordinator.records.ErrorPoint`
(:meth:`ReportBook.evaluate`): a consistent cut of those reports (or the latest ones) mixed to
a common t (:func:`coordinator.metrics.estimate`), with whether the point may decide that eps is
reached.
"""

from __future__ import annotations

import collections
import time

import numpy as np

from coordinator.metrics import Snapshot, consistent_cut, estimate, parse_report, update_view
from coordinator.opt_measure import measure_optimization
from coordinator.records import ErrorPoint, NodeView
from coordinator.registry import Plan
from coordinator.state import ClusterState
from gossip.errors import ProtocolError

__all__ = ["SNAPSHOTS_KEPT", "ReportBook"]

SNAPSHOTS_KEPT = 64
"""Reports kept per node to find a consistent cut."""


class ReportBook:
    """The nodes' recent reports (see the module docstring).

    Parameters
    ----------
    plan : Plan
        The run's settings (topology, rate, metrics period, dimension).
    state : ClusterState
        Where every report's node view goes.
    prefix : str
        The MQTT topic prefix of the cluster's node reports.

    Attributes
    ----------
    fresh : int
        Reports received since the last :meth:`take_fresh`.
    bad : int
        Reports ignored because they could not be parsed.
    """

    def __init__(self, plan: Plan, state: ClusterState, prefix: str) -> None:
        self.plan = plan
        self.state = state
        self.prefix = prefix
        self.fresh = 0
        self.bad = 0
        self._snaps: dict[int, collections.deque[Snapshot]] = {}

    def ingest(self, topic: str, payload: bytes) -> None:
        """Take one node report: update its node view and keep its snapshot.

        A report that cannot be parsed is counted in :attr:`bad` and shown as the state's
        message; it never raises.
        """
        try:
            report = parse_report(topic, payload, self.prefix, self.plan.expected, self.plan.dim)
        except ProtocolError as exc:
            self.bad += 1
            self.state.message = f"ignored a bad report: {exc}"
            return
        node = report["node"]
        view = self.state.nodes.get(node)
        if view is not None and view.final and not report["final"]:
            # A stopped node may still send its periodic report while it lingers; its state
            # cannot change any more, and its final report must stay the one we hold.
            return
        if view is None:
            view = self.state.nodes[node] = NodeView(node=node)
        update_view(view, report, time.time())
        snaps = self._snaps.get(node)
        if snaps is None:
            snaps = self._snaps[node] = collections.deque(maxlen=SNAPSHOTS_KEPT)
        snaps.append(Snapshot(report["t"], report["x"], report["z"], report["edges"], report["y"]))
        self.fresh += 1
        self.state.touch()

    def latest(self) -> list[Snapshot] | None:
        """Every node's latest report (its final one after a stop), by id; ``None`` if some
        node has not reported."""
        histories = [self._snaps.get(k) for k in range(self.plan.expected)]
        if any(h is None or not h for h in histories):
            return None
        return [h[-1] for h in histories if h is not None]

    def take_fresh(self) -> int:
        """Return how many reports arrived since the last call, and reset the count."""
        fresh, self.fresh = self.fresh, 0
        return fresh

    def evaluate(self) -> tuple[ErrorPoint, bool] | None:
        """Mix a consistent cut of the reports (or the latest ones) to a common t.

        Returns the point and whether it may decide that eps is reached (reports recent,
        nobody stopped), or ``None`` while some node has not reported or before the epoch.
        """
        plan = self.plan
        histories = [self._snaps.get(k) for k in range(plan.expected)]
        if not self.state.initial or any(h is None or not h for h in histories):
            return None
        present = [h for h in histories if h is not None]
        latest = [h[-1] for h in present]
        chosen = latest
        cut = consistent_cut(present, plan.topology.edges)
        if cut is not None:
            candidate = [h[i] for h, i in zip(present, cut, strict=True)]
            # At high rates some exchange is always in flight, and the latest consistent cut
            # can lie far back; past a couple of report periods the latest reports (whose mass
            # is then only approximate) describe the present better.
            lag = np.median([s.t for s in latest]) - np.median([s.t for s in candidate])
            if lag <= 2.0 * plan.rate * plan.metrics_period:
                chosen = candidate
        t = np.array([s.t for s in chosen], dtype=np.float64)
        if float(t.max()) <= 0.0:
            return None  # before the epoch: nothing has happened yet
        x = np.array([s.x for s in chosen], dtype=np.float64)
        z = np.array([s.z for s in chosen], dtype=np.float64)
        initial = np.array(self.state.initial, dtype=np.float64)
        # The cut's reports were taken at different times and each misses the jumps after its
        # own time: labelling the cut with the median of those times (mixing the others back or
        # forward, exact either way) balances the jumps it misses against those it has early.
        est = estimate(t, x, z, initial, plan.params.eta, at=float(np.median(t)))
        if self.state.optimization is not None:  # the error is sum_v |x_v - x*|^2 there
            est = measure_optimization(self.state.optimization, chosen, est, time.time())
        # An old report (a slow or dead node) makes the estimate unreliable, so it may not
        # decide that eps is reached.
        spread = float(t.max() - t.min())
        fresh = spread <= 3.0 * plan.rate * plan.metrics_period and not any(
            v.final for v in self.state.nodes.values()
        )
        point = ErrorPoint(est.t, est.error, est.mass_drift_rel, time.time())
        return point, fresh
