"""The nodes' reports as they arrive, the error point they give at a common t, and when eps holds.

:class:`ReportBook` is fed every state report the MQTT link delivers
(:meth:`ReportBook.ingest`): it updates the node's
:class:`~coordinator.figures.records.NodeView` in the
:class:`~coordinator.figures.state.ClusterState` and keeps the node's last reports. Every metrics
period the coordinator asks it for one :class:`Evaluation` (:meth:`ReportBook.evaluate`): a
consistent cut of those reports (or the latest ones) mixed to one common t
(:func:`coordinator.figures.metrics.estimate`), with the t of the report it used for each node.

When the estimate reaches eps (:class:`EpsRule`)
------------------------------------------------
The run stops on its exact curve when it has one (:mod:`coordinator.run.convergence` states that
rule); this rule decides otherwise, and gives the estimate's own crossing in every run.
Reports are not simultaneous, and under load they are far from it: at 1,024 nodes through one
broker a node's latest report can be ten seconds older than its neighbour's (a host process
publishes its 64 nodes one after the other), so a rule that wants every report within a few
report periods of the others never fires. The rule is instead:

    eps is reached when ``confirm`` points in a row are ``<= eps``, no node has stopped, and
    the last of them uses, for every node, a later report than the first did (every node has
    been seen again since); ``t_eps`` is the first point's t. After a membership change the
    rule starts again, and only points at or after the new view's start count: the run never
    stops on the error of the members it is leaving (the coordinator also takes no change
    once it is stopping, so the final values are always those of one view).

Every point is computed from one report per node mixed to one common t (never from a single
node or a partial set: a node that never reported, or has not reported since, blocks the
decision instead of being left out). Guarantee: when eps is declared, the error was measured
``<= eps`` on every evaluation since the first point, and the last one holds a newer state of
every node than the first, so the decision never rests on one set of reports: a stale, delayed
or missing node can delay it, never make it on old values alone. A stale report (taken long
before the common t) is mixed forward without the jumps since and carries the error of its
own time, larger while the error decreases, so staleness delays the decision rather than
hastening it. While nodes gossip the points are estimates (:mod:`coordinator.figures.metrics`); the
exact error, after the stop, is in the run summary (:mod:`coordinator.run.outcome`).

The decision waits for one more report of every node after the estimate first falls below
eps: one report period when the cluster keeps up, the longest gap between two reports of a
node when it does not (not the reports' delay, which only shifts the points).
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from continuized.coordinator.figures.exact_curve import ExactCurve
from continuized.coordinator.figures.metrics import (
    Snapshot,
    consistent_cut,
    estimate,
    parse_report,
    update_view,
)
from continuized.coordinator.figures.opt_measure import exact_measure, measure_optimization
from continuized.coordinator.figures.records import ErrorPoint, NodeView, RunSummary, error_text
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.figures.train_figures import last_accuracy
from continuized.coordinator.membership.plan import Plan
from continuized.gossip.errors import ConfigError, ProtocolError
from continuized.gossip.model.values import error_floor
from continuized.gossip.train.scores import DIVERGED_GROWTH
from continuized.gossip.wire.pubsub import Topics

__all__ = [
    "CONFIRM",
    "DIVERGED",
    "SNAPSHOTS_KEPT",
    "EpsRule",
    "Evaluation",
    "ReportBook",
    "diverged",
    "divergence_text",
    "initial_error",
    "outcome_text",
    "run_diverged",
]

# How a periodic (not final) report says so, as json.dumps writes it (node.daemon): a report
# written otherwise is parsed in full, never misread.
_NOT_FINAL = b'"final": false'
_SAMPLES = b'"trace": [['  # a trace with samples, as json.dumps writes the node's report

SNAPSHOTS_KEPT = 64
"""Reports kept per node to find a consistent cut."""

CONFIRM = 3
"""Points in a row at or below eps before the run counts as converged (see :class:`EpsRule`)."""

DIVERGED = 1e3
"""An error this many times its first value (see :func:`diverged`) means the run diverged."""


def diverged(first: float, last: float, eps: float, floor: float = 0.0) -> bool:
    """Whether a run whose first measured error was ``first`` has diverged at error ``last``.

    It has when ``last`` is not finite, or over :data:`DIVERGED` times the largest of
    ``first``, ``eps`` and ``floor`` (float64's smallest error near the values' mean,
    :func:`gossip.model.values.error_floor`). Growth from an error already at eps (a coordinator
    that resumes a converged run may first see exactly 0), or at the float floor, is
    rounding, not divergence.

    Examples
    --------
    >>> diverged(0.5, 600.0, 1e-6), diverged(0.5, 1e-3, 1e-6)
    (True, False)
    >>> diverged(0.0, 3e-33, 1e-6), diverged(0.0, 3e-33, 1e-300, floor=2.5e-32)
    (False, False)
    """
    if not math.isfinite(last):
        return True
    return last > DIVERGED * max(first, eps, floor, 1e-300)


def initial_error(initial: Sequence[Sequence[float]]) -> float:
    """The averaging error at t = 0, ``sum_v 1/2 |x_v(0) - mean|^2``, of the initial values
    (by node id; 0 for none): the growth :func:`diverged` judges is from here at the least.

    Examples
    --------
    >>> initial_error([[1.0], [0.0], [0.0], [0.0]]), initial_error([])
    (0.375, 0.0)
    """
    if len(initial) == 0:
        return 0.0
    values = np.asarray(initial, dtype=np.float64)
    return 0.5 * float(np.sum((values - values.mean(axis=0)) ** 2))


def run_diverged(state: ClusterState, optimization: bool, eps: float, estimate_fresh: bool) -> bool:
    """Whether the run that ``state`` holds has diverged (the stop rule's "diverged").

    A training run has when its loss did, by the offline rule (training moves the models
    apart: their consensus is not meant to reach 0). Another has when its error grew past
    :func:`diverged`'s bound, from the run's own start (:func:`initial_error`; 0 for an
    ``optimization`` run), judged on the exact curve once it has two points, else on the
    estimates while their reports are fresh (``estimate_fresh``: :attr:`Evaluation.fresh`).
    """
    if state.training is not None:
        return state.training.diverged
    # On the exact curve once it has points: the running estimate mixes reports of different
    # times, and after a broker outage a fresh report mixed back to a stale common t can
    # look like an explosion that never happened.
    history = state.exact if len(state.exact) >= 2 else state.history
    if len(history) < 2:
        return False
    if history is state.history and not estimate_fresh:
        # Reports hundreds of t apart, as right after a broker outage: the estimate mixes
        # the fresh ones back to the median t, by up to exp(2 eta span), and a healthy run
        # looked a million times its start (the broker-restart test, once). A cluster that
        # really diverges keeps reporting, so its next fresh estimate says so.
        return False
    floor = error_floor(state.initial) if state.initial else 0.0
    # Growth is judged from the run's own start, not from this coordinator's first point: a
    # coordinator that resumed mid-run, before the exact curve is back, sees first an
    # estimate that can sit decades below the truth, and then an ordinary one looked like a
    # 1000-fold explosion (the chaos test stopped a healthy run as "diverged" so).
    start = 0.0 if optimization else initial_error(state.initial)
    return diverged(max(history[0].error, start), history[-1].error, eps, floor)


def divergence_text(state: ClusterState) -> str:
    """Why :func:`run_diverged` stopped the run, and the setting to change."""
    if state.training is not None:
        return (
            f"the loss became non-finite or over {DIVERGED_GROWTH:g} times its first value: "
            "the steps are too large for this model (lower --lr)"
        )
    return (
        f"the error grew to {error_text(state.error)}, over {DIVERGED:g} times its initial "
        "value: the exchanges are too slow for this rate (lower --rate)"
    )


def outcome_text(state: ClusterState, summary: RunSummary, until: float) -> str:
    """A stopped run's status: why it diverged (:func:`divergence_text`), or whether it
    reached its target (a training run's accuracy, else the error's ``until``) and its last
    figure."""
    if summary.stop_reason == "diverged":
        return f"diverged: {divergence_text(state)}"
    word = "reached" if summary.reached else "did not reach"
    training = state.training
    if training is not None and training.target is not None:
        return f"{word} accuracy {training.target:g}; accuracy {last_accuracy(state)}"
    return f"{word} {until:g}; final error {error_text(summary.final_error)}"


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One error point and what the eps rule needs to know about the reports behind it.

    Attributes
    ----------
    point : ErrorPoint
        The error and mass drift of the chosen reports mixed to the common t ``point.t``.
    times : ndarray of shape (n,)
        The t of the report used for each node, by id.
    fresh : bool
        Whether all the reports used lie within three report periods of each other.
    stopped : bool
        Whether some node has sent its final report (the cluster is stopping).
    """

    point: ErrorPoint
    times: NDArray[np.float64]
    fresh: bool
    stopped: bool

    @property
    def oldest(self) -> float:
        """The t of the oldest report used."""
        return float(self.times.min())


class EpsRule:
    """Decide when eps is reached from a stream of evaluations (see the module docstring).

    Parameters
    ----------
    eps : float
        The target error (> 0).
    confirm : int
        Points in a row at or below ``eps`` (>= 1).
    """

    def __init__(self, eps: float, confirm: int = CONFIRM) -> None:
        if not (math.isfinite(eps) and eps > 0):
            raise ConfigError(f"eps must be a positive finite number, got {eps!r}")
        if confirm < 1:
            raise ConfigError(f"confirm must be >= 1, got {confirm!r}")
        self.eps = eps
        self.confirm = confirm
        self._first: Evaluation | None = None  # the first point of the current run below eps
        self._count = 0  # points in the current run (only the first is kept: runs can be long)

    def observe(self, ev: Evaluation, not_before: float = -math.inf) -> ErrorPoint | None:
        """Take the next evaluation; return the run's first point when eps is reached now.

        ``not_before`` is the start (units of t) of the latest membership view: a point before
        it measures the old members' mean, so it neither counts nor confirms (a run asked to
        change must not stop on the error of the membership it is leaving).

        Returns ``None`` while eps is not (yet) confirmed; once it returns a point, the caller
        records it as reached (further calls may return points again).
        """
        if self._first is not None and self._first.times.shape != ev.times.shape:
            self._first, self._count = None, 0  # the membership changed: start again
        before = ev.point.t < not_before
        if before or ev.stopped or not ev.point.error <= self.eps:  # ``not <=``: NaN resets
            self._first, self._count = None, 0
            return None
        if self._first is None:
            self._first = ev
        self._count += 1
        first = self._first
        if self._count >= self.confirm and bool(np.all(ev.times > first.times)):
            return first.point
        return None


class ReportBook:
    """The nodes' recent reports (see the module docstring).

    Parameters
    ----------
    plan : Plan
        The run's settings (topology, rate, metrics period, dimension).
    state : ClusterState
        Where every report's node view goes.
    topics : Topics
        The cluster's topics (its node reports come on its state topics).

    Attributes
    ----------
    fresh : int
        Reports received since the last :meth:`take_fresh`.
    bad : int
        Reports ignored because they could not be parsed.
    """

    def __init__(self, plan: Plan, state: ClusterState, topics: Topics) -> None:
        self.plan = plan
        self.state = state
        self.topics = topics
        self.fresh = 0
        self.bad = 0
        self._snaps: dict[int, collections.deque[Snapshot]] = {}
        self._exact: ExactCurve | None = None  # once the initial values are known

    def alive(self, topic: str, payload: bytes) -> bool:
        """Count a periodic report of a stopping run as a sign of life, without parsing it.

        After the stop only the final reports change the outcome, but the nodes keep sending
        periodic ones while they settle, and a coordinator that fell behind (1,024 nodes on a
        loaded machine) has thousands of them queued before the finals. Parsing each cost
        about as much as the backlog was long, and the finals came after the coordinator gave
        up. Returns True if ``payload`` was such a report (the node's view counts it, for
        the wait on the finals); False if it must be ingested (a final report, one that carries
        trace samples, or one this quick look cannot tell: it is then parsed as usual).

        A periodic report's trace samples are sent once (the node hands each grid time out
        once): skipped, a node's grid times between its last report before the stop and its
        final one were lost, and with them every exact point after the stop of a run whose
        nodes report seconds apart (4,096 nodes: none at all).
        """
        if _NOT_FINAL not in payload or _SAMPLES in payload:
            return False
        node = topic.rsplit("/", 2)[-2]
        view = self.state.nodes.get(int(node)) if node.isdigit() else None
        if view is None:
            return False
        view.reports += 1
        return True

    def ingest(self, topic: str, payload: bytes) -> None:
        """Take one node report: update its node view and keep its snapshot.

        A report that cannot be parsed is counted in :attr:`bad` and shown as the state's
        message; it never raises.
        """
        try:
            ids = max(self.plan.expected, len(self.state.initial))  # joined nodes included
            report = parse_report(topic, payload, self.topics, ids, self.plan.dim)
        except ProtocolError as exc:
            self.bad += 1
            self.state.message = f"ignored a bad report: {exc}"
            return
        node = report["node"]
        view = self.state.nodes.get(node)
        if view is not None and view.final and not report["final"]:
            # A stopped node may still send its periodic report while it lingers; its state
            # cannot change any more, and its final report must stay the one we hold. Its
            # samples are still the node's values at their grid times, each sent once: a
            # report that came after the final (which may come over the lifeline, not the
            # broker) brings grid times the final does not have.
            if report["trace"]:
                self._trace(node, report["trace"])
            return
        if view is None:
            view = self.state.nodes[node] = NodeView(node=node)
        update_view(view, report, time.time())
        snaps = self._snaps.get(node)
        if snaps is None:
            snaps = self._snaps[node] = collections.deque(maxlen=SNAPSHOTS_KEPT)
        snaps.append(Snapshot(report["t"], report["x"], report["z"], report["edges"], report["y"]))
        if report["trace"]:
            self._trace(node, report["trace"])
        self.fresh += 1
        self.state.touch()

    def _trace(self, node: int, samples: list[tuple[float, tuple[float, ...]]]) -> None:
        state = self.state
        if self._exact is None:
            if not state.initial:
                return  # before the bootstrap: no run to measure yet
            measure = None
            if state.optimization is not None:
                measure = exact_measure(state.optimization)
                if measure is None:
                    return  # the coordinator cannot turn the nodes' duals into x
            elif state.training is not None:  # also scores the average model at each point
                measure = state.training.measure(np.array(state.initial, dtype=np.float64))
            self._exact = ExactCurve(np.array(state.initial, dtype=np.float64), measure)
        if self._members_changed():
            self._exact.stop()  # the grid times of another network: the curve ends here
            return
        state.add_exact(self._exact.add(node, samples, time.time()))

    @property
    def exact_possible(self) -> bool:
        """Whether the run may still have an exact curve: none yet, or one that is neither
        stopped nor of other members."""
        curve = self._exact
        return curve is None or not (curve.stopped or self._members_changed())

    @property
    def exact_live(self) -> bool:
        """Whether the run has an exact curve to decide eps on (:mod:`coordinator.run.convergence`):
        it has points and its members never changed."""
        curve = self._exact
        if curve is None or curve.stopped or curve.last is None:
            return False
        # The members changed: the curve is stopped at the next trace; its points until then
        # are the old members' (a decision on them would stop the new view on the old mean).
        return not self._members_changed()

    def _members_changed(self) -> bool:
        return bool(self.state.departed) or len(self.state.initial) != self.plan.expected

    def exact_note(self) -> str:
        """Why the run's exact curve is missing or ends early; ``""`` when it covers the run."""
        curve = self._exact
        if curve is None:
            opt = self.state.optimization
            if opt is not None and opt.task.problems is None:
                return (
                    "not collected: the coordinator has no copy of the problems to turn the "
                    "nodes' duals y into x"
                )
            return "not collected: no node sent a trace (nodes older than the exact curve)"
        if curve.stopped or self._members_changed():
            last = f" after t={curve.last.t:.6g}" if curve.last is not None else ""
            return f"stopped{last}: the members changed"
        if curve.last is None:
            return "no grid time completed: some node's samples never arrived"
        return ""

    def end_exact(self, t: float) -> None:
        """End the exact curve at ``t``: the coordinator is asking the nodes to stop."""
        if self._exact is not None:
            self._exact.end_at(t)

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

    def evaluate(self) -> Evaluation | None:
        """Mix a consistent cut of the reports (or the latest ones) to a common t.

        Returns the point with the age of its reports, or ``None`` while some node has not
        reported or before the epoch.
        """
        plan = self.plan
        # Only the current members: a node that left is measured no more (coordinator.run.roster).
        departed = self.state.departed
        everyone = max(plan.expected, len(self.state.initial))  # joined nodes have ids past n
        ids = [k for k in range(everyone) if k not in departed]
        histories = [self._snaps.get(k) for k in ids]
        if not self.state.initial or any(h is None or not h for h in histories):
            return None
        present = [h for h in histories if h is not None]
        latest = [h[-1] for h in present]
        chosen = latest
        view = self.state.view
        edges = plan.topology.edges if view is None else view.edges
        cut = consistent_cut(present, edges, ids)
        candidate = None if cut is None else [h[i] for h, i in zip(present, cut, strict=True)]
        # A cut that reaches back before the view's start would mix two memberships (a report
        # from before the switch still holds the flows the switch rolled back): not a cut.
        if candidate is not None and (view is None or min(s.t for s in candidate) >= view.start):
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
        initial = np.array([self.state.initial[k] for k in ids], dtype=np.float64)
        eta = plan.params.eta if view is None else view.eta
        # The cut's reports were taken at different times and each misses the jumps after its
        # own time: labelling the cut with the median of those times (mixing the others back or
        # forward, exact either way) balances the jumps it misses against those it has early.
        est = estimate(t, x, z, initial, eta, at=float(np.median(t)))
        if self.state.optimization is not None:  # the error is sum_v |x_v - x*|^2 there
            est = measure_optimization(self.state.optimization, chosen, est, time.time())
        spread = float(t.max() - t.min())
        point = ErrorPoint(est.t, est.error, est.mass_drift_rel, time.time())
        return Evaluation(
            point,
            times=t,
            fresh=spread <= 3.0 * plan.rate * plan.metrics_period,
            stopped=any(v.final for k, v in self.state.nodes.items() if k not in departed),
        )
