"""The coordinator: bootstrap the nodes, then only listen, measure, and decide when to stop.

Theory of operation
-------------------
1. :func:`prepare` checks the configuration and computes everything that does not need a
   node: the topology (``gossip.graph.topology``), its quantities (``gossip.graph.spectral``), the
   algorithm's parameters (``gossip.model.algorithms``) and, when the experiment chooses them, the
   initial values (``gossip.model.values``).
2. :meth:`Coordinator.run` connects to the broker (:class:`~coordinator.mqtt.link.MqttLink`;
   not within ``broker_wait`` s: an error naming it) and looks at the retained status topic: if
   a previous coordinator left a running run of the same graph, algorithm and rate, it adopts
   that run (ids, epoch, values, Bootstraps, membership, progress). Then it binds the
   registration ROUTER and waits for the expected count; who is in the run is its collaborator
   :class:`~coordinator.run.enrollment.Enrollment`'s business.
3. After the bootstrap it only listens: every ``metrics_period`` seconds it mixes the nodes'
   latest reports to a common t (:class:`coordinator.run.evaluation.ReportBook`), appends the point
   to the history and the metrics file, writes the exact curve's new points (assembled from the
   nodes' traces as their reports arrive, :mod:`coordinator.figures.exact_curve`) there too,
   and, once :class:`coordinator.run.convergence.Convergence` says eps is reached (three exact
   points in a row ``<= eps``; the estimates' rule only for a run without an exact curve), publishes
   ``{"cmd": "stop"}`` on the control topic (re-sent every second; the nodes' beats on the
   registration socket are answered with a stop too, :mod:`node.lifeline`) and waits for every
   node's final report, over either way. Without a broker for ``broker_deadline`` seconds, it
   stops the run that way alone.
4. The final reports, mixed to a common t, give the exact final error and mass drift: no
   exchange is in flight any more (:mod:`coordinator.run.outcome`). The run summary goes to the
   status topic (retained, :mod:`coordinator.run.status`), the
   metrics file, the ``--json`` file and :class:`~coordinator.figures.state.ClusterState`.

Nodes never depend on the coordinator after the bootstrap: if it dies they keep gossiping,
and a coordinator restarted with the same arguments resumes the run from step 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import time
from typing import Any

import numpy as np
import zmq
import zmq.asyncio

from continuized.coordinator.figures.lanrule import LanRule
from continuized.coordinator.figures.opt_measure import finish_optimization
from continuized.coordinator.figures.records import ErrorPoint, RunSummary, missing_text
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.figures.thinning import since
from continuized.coordinator.membership.plan import Plan
from continuized.coordinator.membership.registrar import bound_socket
from continuized.coordinator.mqtt.link import MqttLink
from continuized.coordinator.run._groups import single_error
from continuized.coordinator.run.companions import serve_dashboard, simulate_training_band
from continuized.coordinator.run.config import CoordinatorConfig, prepare
from continuized.coordinator.run.convergence import Convergence
from continuized.coordinator.run.enrollment import Enrollment
from continuized.coordinator.run.evaluation import (
    ReportBook,
    outcome_text,
    run_diverged,
)
from continuized.coordinator.run.finals import FinalsWait
from continuized.coordinator.run.outcome import (
    final_result,
    node_shares,
    pace_of,
    run_summary,
    summary_record,
)
from continuized.coordinator.run.runlog import RunLog
from continuized.coordinator.run.status import run_header, status_record
from continuized.gossip.errors import GossipError
from continuized.gossip.wire.pubsub import Topics

__all__ = ["Coordinator", "CoordinatorConfig", "prepare"]  # the last two: coordinator.run.config

log = logging.getLogger(__name__)
_RESUME_WAIT = 1.0  # seconds, once connected, to wait for a retained status before a fresh run
EXACT_GRACE = 10.0
"""Seconds a resumed coordinator waits for the exact curve before the estimates may decide eps
(the nodes send their last 10 s of samples again when it connects)."""


# Seconds the registration socket stays open after the summary for the nodes' lifelines to
# hear that their final reports are taken (a node's final beat goes out 0.1 s after it stops).
_TELL_FINALS_WITHIN = 3.0


def _new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{random.getrandbits(24):06x}"


class Coordinator:
    """One coordinator run (see the module docstring).

    Parameters
    ----------
    config : CoordinatorConfig
    state, plan : from :func:`prepare` (computed here when not given).
    broker_kind : str
        Shown in the state: ``external``, ``mosquitto`` or ``amqtt``.
    """

    def __init__(
        self,
        config: CoordinatorConfig,
        state: ClusterState | None = None,
        plan: Plan | None = None,
        broker_kind: str = "external",
    ) -> None:
        if state is None or plan is None:
            state, plan = prepare(config)
        self.config = config
        self.state = state
        self.plan = plan
        self._band_done = asyncio.Event()  # the training band's simulation ended, either way
        self.state.broker.kind = broker_kind
        self.log = RunLog(config.metrics_file)
        self.bound = asyncio.Event()
        """Set once the registration socket is bound (nodes may register from then on)."""
        self._retained: bytes | None = None
        self._retained_seen = asyncio.Event()
        self._pace = (0.0, 0)
        self._finals_wait: float | None = None  # seconds from the stop to the last final report
        self.finals = FinalsWait(self.state, plan.expected)
        self._shares = node_shares(plan.topology)
        # The LAN rules (rate against round trip, clock skew), checked on the reports.
        self.lan = LanRule(plan.expected, plan.rate)
        self._resumed_at: float | None = None  # when this coordinator adopted a running run
        self._exact_logged = 0  # exact points ever appended (state.exact) already in the file
        self._t_stop: float | None = None
        self._asked_stop = ""
        # Whether the latest estimate's reports lay within a few report periods of each other
        # (Evaluation.fresh): one that mixes a stale report with fresh ones is no evidence of
        # divergence (see coordinator.run.evaluation.run_diverged).
        self._estimate_fresh = True
        self.record: dict[str, Any] | None = None
        """The run's final record (the ``--json`` file's content), once the run is over."""
        self._link: MqttLink | None = None
        self._topics = Topics(config.cluster)
        self.reports = ReportBook(plan, state, self._topics)
        self.members = Enrollment(
            config,
            plan,
            state,
            self.reports,
            self.log,
            self._publish_status,
            self._header,
            _new_run_id(),
        )
        members = self.members
        self.registry, self.stats, self.churn = members.registry, members.stats, members.churn
        if config.broker:
            sec = plan.security
            url = config.broker if sec is None else sec.coordinator_broker(config.broker)
            self._link = MqttLink.to(
                url, config.cluster, self._on_message, state.broker, ca=config.mqtt_ca
            )
            self.churn.link = self._link

    @property
    def resumed(self) -> bool:
        """Whether this coordinator adopted a run from the retained status."""
        return self.members.resumed

    # -- lifetime ------------------------------------------------------------------------------

    async def run(self) -> RunSummary | None:
        """Run until the run is over (summary) or, with ``keep_running``, until cancelled.

        Returns ``None`` when there is no broker (nothing to measure): the coordinator then
        serves registrations until cancelled.

        Raises
        ------
        GossipError
            Registration timeout, a socket that cannot be bound, a bad dashboard setting.
        """
        self.log.open()
        ctx = zmq.asyncio.Context()
        try:
            with single_error():
                return await self._run(ctx)
        finally:
            ctx.destroy(linger=0)
            self.log.close()

    async def _run(self, ctx: zmq.asyncio.Context) -> RunSummary | None:
        async with asyncio.TaskGroup() as tg:
            background: list[asyncio.Task[None]] = []
            if self._link is not None:
                background.append(tg.create_task(self._link.run(), name="mqtt-link"))
            if self.config.dashboard_port is not None:
                background.append(
                    tg.create_task(serve_dashboard(self.state, self.config), name="dashboard")
                )
            if self.state.training is not None and self.config.training_runs > 0:
                background.append(
                    tg.create_task(
                        simulate_training_band(self.state, self.plan, self.config, self._band_done),
                        name="training-band",
                    )
                )
            try:
                if self._link is not None:  # absent at the start: a setting to fix, said now
                    await self._link.reached(self.config.broker_wait)
                    if self.config.resume:
                        await self._try_resume()
                sec = self.plan.security
                with bound_socket(
                    ctx,
                    self.config.bind,
                    secret=sec.secret if sec else "",
                    allowed=sec.allowed if sec else None,
                ) as sock:
                    background.append(
                        tg.create_task(
                            self.members.serve(sock, authenticated=sec is not None),
                            name="registrar",
                        )
                    )
                    self.bound.set()
                    return await self._supervise()
            finally:
                if self._link is not None:
                    self._link.stop()
                for task in background:
                    task.cancel()

    # -- registration and resume ---------------------------------------------------------------

    async def _try_resume(self) -> None:
        assert self._link is not None
        with contextlib.suppress(TimeoutError):
            # The broker first, however long it takes to come back (within the registration's
            # budget): deciding without it started a fresh run over a running one whenever the
            # restarted coordinator took over a second to connect (the chaos test, loaded).
            async with asyncio.timeout(self.config.register_timeout):
                await self._link.connected.wait()
            # Then the retained status, which the broker sends right after the subscription.
            async with asyncio.timeout(_RESUME_WAIT):
                await self._retained_seen.wait()
        if self._retained is None:
            return
        try:
            status = json.loads(self._retained)
        except ValueError:
            return
        stop = self.members.resume(status)
        if self.members.resumed:
            self._resumed_at = time.time()
        if stop:  # the previous coordinator had decided: stop, as it would have
            self.request_stop(stop)

    # -- reports -------------------------------------------------------------------------------

    def _on_message(self, topic: str, payload: bytes) -> None:
        if topic == self._topics.status:
            if not self._retained_seen.is_set():
                self._retained = payload or None
                self._retained_seen.set()
            return
        if topic == self._topics.membership:
            self.churn.on_request(payload, time.time())
            return
        if self.state.phase == "stopping" and self.reports.alive(topic, payload):
            return  # only the finals count now: see Reports.alive
        self.reports.ingest(topic, payload)

    # -- supervision ---------------------------------------------------------------------------

    async def _supervise(self) -> RunSummary | None:
        await self.members.wait_bootstrap()
        if self._link is None:
            await asyncio.Event().wait()  # nothing to measure: serve registrations until cancelled
        period = self.config.metrics_period
        epoch = self.state.epoch or time.time()
        stop_reason = ""
        convergence = Convergence(self.config.until, self.plan.rate)
        view = self.churn.view
        while not stop_reason:
            await asyncio.sleep(period)
            self.churn.tick(time.time())
            if self.churn.view is not view:  # new members, a new mean: decide afresh
                view = self.churn.view
                convergence.restart()
            convergence.add_exact(self._log_exact())
            if self.reports.take_fresh():
                self._check_lan()
                evaluated = self.reports.evaluate()
                if evaluated is not None:
                    point = evaluated.point
                    self._estimate_fresh = evaluated.fresh
                    self.state.record(point, may_reach=False)
                    convergence.add_estimate(evaluated, -math.inf if view is None else view.start)
                    if self.state.phase == "running" and not evaluated.stopped:
                        self._pace = self._pace_now(point.t)
                    self.log.write(
                        "point",
                        t=point.t,
                        error=point.error,
                        mass_drift_rel=point.mass_drift_rel,
                        activations=self.state.activations(),
                        nodes=len(self.state.nodes),
                        fresh=evaluated.fresh,
                        oldest=evaluated.oldest,
                    )
            self._judge(convergence, epoch)
            if self._asked_stop:
                stop_reason = self._asked_stop
            elif self.config.keep_running:
                continue
            elif self.state.reached:
                stop_reason = "reached"
            elif run_diverged(
                self.state, self.plan.task is not None, self.config.until, self._estimate_fresh
            ):
                stop_reason = "diverged"
            elif (
                self.config.run_timeout is not None
                and time.time() - epoch > self.config.run_timeout
            ):
                stop_reason = "timeout"
            elif self._broker_lost():
                stop_reason = "broker-lost"
        return await self._stop(stop_reason)

    def _check_lan(self) -> None:
        """Warn (stderr, and the run log) when the rate or the clocks break the LAN rules."""
        for warning in self.lan.observe(self.state.nodes):
            log.warning("%s", warning)
            self.log.write("warning", message=warning)

    def _broker_lost(self) -> bool:
        """Whether the broker has been unreachable for ``broker_deadline`` seconds in a row
        (never without a deadline: a broker outage alone never ends a run)."""
        link, deadline = self._link, self.config.broker_deadline
        if link is None or deadline is None or link.connected.is_set():
            return False
        return time.time() - link.disconnected_since > deadline

    def request_stop(self, reason: str = "asked") -> None:
        """Stop the run at the next metrics period, even with ``keep_running``: the nodes are
        told to stop and their final reports taken, as when eps is reached (``reason`` goes to
        the summary)."""
        self._asked_stop = reason or "asked"

    async def _stop(self, reason: str) -> RunSummary:
        assert self._link is not None
        self.members.stop_reason = reason
        self.state.set_phase("stopping", f"stop ({reason}): waiting for the final reports")
        self.registry.closed = True  # a standing node done with this run waits for the next
        epoch = self.state.epoch if self.state.epoch is not None else time.time()
        self._t_stop = self.plan.rate * (time.time() - epoch)
        self.reports.end_exact(self._t_stop)
        self.log.write("stop", reason=reason)
        self._publish_status()
        run_id = self.state.run_id
        link = self._link
        self._finals_wait = await self.finals.wait(
            self.config.stop_timeout, lambda: link.send_stop(run_id)
        )
        self._check_lan()  # a run shorter than the nodes' round-trip window: the finals have it
        if self.state.training is not None and self.config.training_runs > 0:
            # The verdict on the accuracy curve needs the simulator's runs: wait for them.
            self.state.set_phase("stopping", "waiting for the simulator's runs of the training")
            await self._band_done.wait()
        summary = self._finish(reason)
        self._publish_status(summary)
        await asyncio.gather(self._drain(), self.members.tell_finals(_TELL_FINALS_WITHIN))
        return summary

    def _pace_now(self, t: float) -> tuple[float, int]:
        """``(t, activations)`` now, for the achieved rate
        (:func:`coordinator.run.outcome.pace_of`);
        once members joined or left, the point's t with every count (the edges' P_e changed)."""
        if self.state.departed or len(self.state.nodes) != self.plan.expected:
            return t, self.state.activations()
        return pace_of(self.state.nodes.values(), self._shares)

    def _judge(self, convergence: Convergence, epoch: float) -> None:
        """Mark eps reached in the state once ``convergence`` says so (its rule: the exact
        curve's while the run has one), and the estimates' own crossing."""
        state = self.state
        if convergence.estimate is not None:
            state.mark_estimate(convergence.estimate.t, convergence.estimate.wall)
        exact = self.reports.exact_live
        if not exact and self._resumed_at is not None and self.reports.exact_possible:
            # A resumed coordinator rebuilds the exact curve from the samples the nodes send
            # again (their last 10 s): until then the estimates, which the run's end may
            # already have passed, must not decide with t to eps unknown.
            exact = time.time() - self._resumed_at < EXACT_GRACE
        training = state.training
        t_eps: float | None
        wall_s: float | None
        if training is not None and training.target is not None:
            # --until-accuracy: the accuracy decides, on the exact points, not the consensus.
            if state.reached or training.t_target is None:
                return
            t_eps, wall_s = training.t_target, training.t_target / self.plan.rate
        elif state.reached or not convergence.reached(exact):
            return
        else:
            t_eps, wall_s = convergence.t_eps(exact), convergence.wall_s(exact)
        state.mark_reached(t_eps, None if wall_s is None else epoch + wall_s)
        self.log.write(
            "reached",
            t_eps=t_eps,
            wall_s=wall_s,
            t_eps_estimate=state.t_eps_estimate,
            exact=exact,
            decided_s=time.time() - epoch,
        )
        self._publish_status()

    def _log_exact(self) -> list[ErrorPoint]:
        """Write the exact points completed since the last call to the metrics file; return
        them."""
        state = self.state
        new = since(state.exact, state.exact_dropped, self._exact_logged)
        for point in new:
            self.log.write(
                "exact", t=point.t, error=point.error, mass_drift_rel=point.mass_drift_rel
            )
        self._exact_logged = len(state.exact) + state.exact_dropped
        return new

    def _finish(self, reason: str) -> RunSummary:
        state = self.state
        self._log_exact()  # the final reports complete the last grid times
        state.exact_note = self.reports.exact_note()
        final = final_result(state, self.plan, self._t_stop)
        latest = self.reports.latest()
        if state.optimization is not None and final is not None and latest is not None:
            final = finish_optimization(state.optimization, latest, final, time.time())
        if state.training is not None and final is not None and final.complete:
            state.training.finish(final.t, np.array(final.values, dtype=np.float64))
        if state.training is not None:
            state.training.judge()
        pace = self._pace
        if pace[0] <= 0.0 and final is not None and final.complete:
            # No fresh point came while every node initiated (a large run's reports come
            # seconds apart): the final reports' counts, each up to its own t. Low rather than
            # high: it counts the time a node settles after the stop, when it starts nothing
            # (over the stop's t instead, it would count the exchanges that nodes, loaded and
            # hearing the stop seconds late, start after it).
            pace = self._pace_now(final.t)
        summary = run_summary(state, self.plan, final, pace, reason, self._finals_wait)
        state.final = final
        state.runs.append(summary)
        done = outcome_text(state, summary, self.config.until)
        state.set_phase("done", done + missing_text(summary.missing_finals))
        record = summary_record(self.config, self.plan, state, summary, final, reason)
        self.record = record
        self.log.write("final", **record)
        if self.config.json_path is not None:
            self.log.save_summary(self.config.json_path, record)
        return summary

    async def _drain(self) -> None:
        """Give the link a moment to deliver the final status before the tasks are cancelled."""
        if self._link is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await self._link.wait_idle()

    # -- status --------------------------------------------------------------------------------

    def _header(self) -> dict[str, Any]:
        return run_header(self.config, self.plan, self.state)

    def _publish_status(self, summary: RunSummary | None = None) -> None:
        if self._link is None:
            return
        status = status_record(
            self.config,
            self.plan,
            self.state,
            self.registry.assignment,
            summary,
            churn=self.churn.record(),
            stop_reason=self.members.stop_reason,
        )
        try:
            self._link.set_status(status)
        except (TypeError, ValueError) as exc:  # a non-finite float would be a bug here
            raise GossipError(f"cannot encode the coordinator status: {exc}") from exc
