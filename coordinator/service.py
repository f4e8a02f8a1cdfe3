"""The coordinator: bootstrap the nodes, then only listen, measure, and decide when to stop.

Theory of operation
-------------------
1. :func:`prepare` checks the configuration and computes everything that does not need a
   node: the topology (``gossip.graph.topology``), its quantities (``gossip.graph.spectral``), the
   algorithm's parameters (``gossip.model.algorithms``) and, when the experiment chooses them, the
   initial values (``gossip.model.values``).
2. :meth:`Coordinator.run` connects to the broker (:class:`~coordinator.mqtt_link.MqttLink`)
   and looks at the retained status topic: if a previous coordinator left a running run of the
   same graph, algorithm and rate, it adopts that run (same ids, epoch, values, Bootstraps)
   instead of starting a new one. Then it binds the registration ROUTER
   (:mod:`coordinator.registrar`) and waits for the expected count (``register_timeout``).
3. After the bootstrap it only listens: every ``metrics_period`` seconds it mixes the nodes'
   latest reports to a common t (:class:`coordinator.evaluation.ReportBook`), appends the point to
   the history and the metrics file, writes the exact curve's new points (assembled from the
   nodes' traces as their reports arrive, :mod:`coordinator.exact_curve`) there too, and, once
   :class:`coordinator.convergence.Convergence` says eps is reached (three exact points in a
   row ``<= eps``; the estimates' rule only for a run without an exact curve), publishes
   ``{"cmd": "stop"}`` on the control topic (re-sent every second) and waits for every node's
   final report.
4. The final reports, mixed to a common t, give the exact final error and mass drift: no
   exchange is in flight any more (:mod:`coordinator.outcome`). The run summary goes to the
   status topic (retained, :mod:`coordinator.status`), the
   metrics file, the ``--json`` file and :class:`~coordinator.state.ClusterState`.

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
import sys
import time
from typing import Any

import zmq
import zmq.asyncio

from coordinator._groups import single_error
from coordinator.broker_url import broker_credentials, parse_broker_url, redact_broker_url
from coordinator.config import CoordinatorConfig, prepare
from coordinator.convergence import Convergence
from coordinator.evaluation import DIVERGED, ReportBook, diverged, initial_error
from coordinator.lanrule import LanRule
from coordinator.mqtt_link import MqttLink, topics
from coordinator.opt_measure import finish_optimization
from coordinator.outcome import final_result, node_shares, pace_of, run_summary
from coordinator.records import ErrorPoint, RunSummary, error_text
from coordinator.registrar import RegistrarStats, bound_socket, serve_registrations
from coordinator.registry import Assignment, Plan, Readdressed, Ready, Registry
from coordinator.roster import Churn
from coordinator.runlog import RunLog, write_json
from coordinator.state import ClusterState
from coordinator.status import restore_membership, resumable, run_header, status_record
from gossip.errors import ConfigError, GossipError, TransportError
from gossip.model.values import error_floor

__all__ = ["Coordinator", "CoordinatorConfig", "prepare"]  # the last two from coordinator.config

log = logging.getLogger(__name__)
_RESUME_WAIT = 1.0  # seconds, once connected, to wait for a retained status before a fresh run
_STOP_RESEND = 1.0  # seconds between two stop commands while waiting for final reports


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
        self.state.broker.kind = broker_kind
        self.registry = Registry(plan, _new_run_id())
        self.stats = RegistrarStats()
        self.log = RunLog(config.metrics_file)
        self.resumed = False
        self.bound = asyncio.Event()
        """Set once the registration socket is bound (nodes may register from then on)."""
        self._retained: bytes | None = None
        self._retained_seen = asyncio.Event()
        self._pace = (0.0, 0)
        self._shares = node_shares(plan.topology)
        # The LAN rules (rate against round trip, clock skew), checked on the reports.
        self.lan = LanRule(plan.expected, plan.rate)
        self._exact_logged = 0  # exact points (state.exact) already in the metrics file
        self._t_stop: float | None = None
        self._asked_stop = ""
        self._link: MqttLink | None = None
        self._topics = topics(config.cluster)
        self.reports = ReportBook(plan, state, self._topics["prefix"])
        self.churn = Churn(
            plan,
            state,
            None,
            dead_after=config.dead_after,
            on_event=self._on_membership,
        )
        if config.allow_joins:
            self.registry.on_join = lambda msg, address: self.churn.join(
                msg, address, self.registry.assignment
            )
        if config.broker:
            sec = plan.security
            url = config.broker if sec is None else sec.coordinator_broker(config.broker)
            host, port = parse_broker_url(url)
            username, password = broker_credentials(url)
            self._link = MqttLink(
                host,
                port,
                config.cluster,
                self._on_message,
                state.broker,
                username=username,
                password=password,
                tls=url.startswith("mqtts://"),
                ca=config.mqtt_ca,
            )
            self.churn.link = self._link

    def _on_membership(self, event: dict[str, Any]) -> None:
        self.log.write(
            "membership", event=event["kind"], **{k: v for k, v in event.items() if k != "kind"}
        )
        # Retained at once: a coordinator restarted from here measures these members.
        self._publish_status()

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
                background.append(tg.create_task(self._dashboard(), name="dashboard"))
            try:
                if self._link is not None and self.config.resume:
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
                            serve_registrations(
                                sock,
                                self.registry,
                                self.stats,
                                self._on_ready,
                                self._on_registered,
                                authenticated=sec is not None,
                                on_readdress=self._on_readdressed,
                                on_leave=lambda name, sender: self.churn.on_leave(
                                    name, sender, time.time()
                                ),
                            ),
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

    async def _dashboard(self) -> None:
        try:
            from coordinator.dashboard import serve
        except ImportError as exc:
            raise ConfigError(
                f"--dashboard-port needs the dashboard (coordinator.dashboard): {exc}"
            ) from None
        await serve(
            self.state,
            self.config.dashboard_host,
            self.config.dashboard_port if self.config.dashboard_port is not None else 8080,
            self.config.dashboard_token or None,
            runs_dir=self.config.dashboard_runs_dir,
            on_ready=announce_dashboard,
        )

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
        if not resumable(status, self.config, self.plan):
            return
        assignment = Assignment.from_dict(status["assignment"])
        self.registry.restore(assignment)
        self.resumed = True
        self._adopt(assignment)
        restore_membership(self.state, status.get("membership"))
        self.state.set_phase("running", f"resumed run {assignment.run_id}")
        self.log.write("resume", **self._header())
        self._publish_status()

    def _adopt(self, assignment: Assignment) -> None:
        state = self.state
        state.run_id = assignment.run_id
        state.epoch = assignment.epoch
        state.initial = list(assignment.initial)
        state.registered = {name: k for k, name in enumerate(assignment.names)}
        state.touch()

    def _on_registered(self) -> None:
        if not self.registry.bootstrapped:
            self.state.registered = {name: k for k, name in enumerate(self.registry.names)}
            self.state.message = f"{len(self.state.registered)} of {self.plan.expected} registered"
            self.state.touch()

    def _on_readdressed(self, outcome: Readdressed) -> None:
        # The retained assignment must name the new address: a coordinator that resumes the
        # run, and the neighbours it bootstraps again, would use the dead one.
        self._publish_status()

    def _on_ready(self, ready: Ready) -> None:
        self._adopt(ready.assignment)
        self.state.set_phase(
            "running", f"bootstrapped {self.plan.expected} nodes; t starts at the epoch"
        )
        self.log.write("start", **self._header())
        self._publish_status()

    async def _wait_bootstrap(self) -> None:
        deadline = time.monotonic() + self.config.register_timeout
        while not self.registry.bootstrapped:
            if time.monotonic() > deadline:
                names = list(self.state.registered)
                shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
                detail = f" ({shown})" if names else ""
                hint = (
                    f"; last refusal: {self.stats.last_refusal}" if self.stats.last_refusal else ""
                )
                raise TransportError(
                    f"only {len(names)} of {self.plan.expected} nodes registered within "
                    f"{self.config.register_timeout:g} s{detail}{hint}; start the others with "
                    f"`gossip node --coordinator {self.config.bind}`"
                )
            await asyncio.sleep(0.05)

    # -- reports -------------------------------------------------------------------------------

    def _on_message(self, topic: str, payload: bytes) -> None:
        if topic == self._topics["status"]:
            if not self._retained_seen.is_set():
                self._retained = payload or None
                self._retained_seen.set()
            return
        if topic == self._topics["membership"]:
            self.churn.on_request(payload, time.time())
            return
        self.reports.ingest(topic, payload)

    # -- supervision ---------------------------------------------------------------------------

    async def _supervise(self) -> RunSummary | None:
        await self._wait_bootstrap()
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
            elif self._diverged():
                stop_reason = "diverged"
                self.state.message = (
                    f"the error grew to {self.state.error:.3g}, over {DIVERGED:g} times its "
                    "initial value: the exchanges are too slow for this rate (lower --rate)"
                )
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

    def _diverged(self) -> bool:
        # On the exact curve once it has points: the running estimate mixes reports of different
        # times, and after a broker outage a fresh report mixed back to a stale common t can
        # look like an explosion that never happened.
        history = self.state.exact if len(self.state.exact) >= 2 else self.state.history
        if len(history) < 2:
            return False
        floor = error_floor(self.state.initial) if self.state.initial else 0.0
        # Growth is judged from the run's own start, not from this coordinator's first point: a
        # coordinator that resumed mid-run, before the exact curve is back, sees first an
        # estimate that can sit decades below the truth, and then an ordinary one looked like a
        # 1000-fold explosion (the chaos test stopped a healthy run as "diverged" so).
        start = 0.0 if self.plan.task is not None else initial_error(self.state.initial)
        return diverged(max(history[0].error, start), history[-1].error, self.config.until, floor)

    async def _stop(self, reason: str) -> RunSummary:
        assert self._link is not None
        self.state.set_phase("stopping", f"stop ({reason}): waiting for the final reports")
        epoch = self.state.epoch if self.state.epoch is not None else time.time()
        self._t_stop = self.plan.rate * (time.time() - epoch)
        self.reports.end_exact(self._t_stop)
        self.log.write("stop", reason=reason)
        self._publish_status()
        now = time.monotonic()
        deadline = now + self.config.stop_timeout
        resend = now
        while now < deadline:
            if self._finals_in():
                break
            if now >= resend:
                # Re-sent until every node has answered: a node that was reconnecting to the
                # broker when the first one went out must not keep gossiping.
                self._link.send_stop(self.state.run_id)
                resend = now + _STOP_RESEND
            await asyncio.sleep(0.02)
            now = time.monotonic()
        self._check_lan()  # a run shorter than the nodes' round-trip window: the finals have it
        summary = self._finish(reason)
        self._publish_status(summary)
        await self._drain()
        return summary

    def _finals_in(self) -> bool:
        """Whether every member has sent its final report (departed nodes are not waited for)."""
        gone = self.state.departed
        finals = sum(v.final for k, v in self.state.nodes.items() if k not in gone)
        return finals >= max(self.plan.expected, len(self.state.initial)) - len(gone)

    def _pace_now(self, t: float) -> tuple[float, int]:
        """``(t, activations)`` now, for the achieved rate (:func:`coordinator.outcome.pace_of`);
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
        if state.reached or not convergence.reached(exact):
            return
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
        new = self.state.exact[self._exact_logged :]
        for point in new:
            self.log.write(
                "exact", t=point.t, error=point.error, mass_drift_rel=point.mass_drift_rel
            )
        self._exact_logged = len(self.state.exact)
        return new

    def _finish(self, reason: str) -> RunSummary:
        state = self.state
        self._log_exact()  # the final reports complete the last grid times
        state.exact_note = self.reports.exact_note()
        final = final_result(state, self.plan, self._t_stop)
        latest = self.reports.latest()
        if state.optimization is not None and final is not None and latest is not None:
            final = finish_optimization(state.optimization, latest, final, time.time())
        summary = run_summary(state, self.plan, final, self._pace, reason)
        state.final = final
        state.runs.append(summary)
        complete = final is not None and final.complete
        state.set_phase(
            "done",
            f"{'reached' if summary.reached else 'did not reach'} {self.config.until:g}; "
            f"final error {error_text(summary.final_error)}"
            + _missing_text(summary.missing_finals),
        )
        record = {
            **summary.as_dict(),
            "final_t": final.t if final else None,
            "complete": complete,
            "graph": self.config.graph,
            "algorithm": self.plan.params.algorithm.value,
            "nodes": self.plan.expected,
            "eps": self.config.until,
        }
        if reason == "broker-lost":
            record["failure"] = (
                f"lost the broker {redact_broker_url(self.config.broker)}: unreachable for over "
                f"--broker-deadline {self.config.broker_deadline:g} s"
            )
            state.message = record["failure"]
        if state.churn:
            record["membership"] = list(state.churn)
        if state.optimization is not None:
            record["algorithm"] = "acd"
            record["optimization"] = state.optimization.summary()
        self.log.write("final", **record)
        if self.config.json_path is not None:
            write_json(self.config.json_path, record)
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
            self.config, self.plan, self.state, self.registry.assignment, summary
        )
        try:
            self._link.set_status(status)
        except (TypeError, ValueError) as exc:  # a non-finite float would be a bug here
            raise GossipError(f"cannot encode the coordinator status: {exc}") from exc


def _missing_text(missing: tuple[str, ...]) -> str:
    """`` (no final report from a, b): unknown`` for the phase message; ``""`` if none."""
    if not missing:
        return ""
    shown = ", ".join(missing[:8]) + (", ..." if len(missing) > 8 else "")
    return f" (no final report from {shown}): unknown"


def announce_dashboard(url: str) -> None:
    """Tell the user where the dashboard listens (on stderr, beside the progress output)."""
    print(f"dashboard: {url}", file=sys.stderr, flush=True)
