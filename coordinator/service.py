"""The coordinator: bootstrap the nodes, then only listen, measure, and decide when to stop.

Theory of operation
-------------------
1. :func:`prepare` checks the configuration and computes everything that does not need a
   node: the topology (``gossip.topology``), its quantities (``gossip.spectral``), the
   algorithm's parameters (``gossip.params``) and, when the experiment chooses them, the
   initial values (``gossip.values``).
2. :meth:`Coordinator.run` connects to the broker (:class:`~coordinator.mqtt_link.MqttLink`)
   and looks at the retained status topic: if a previous coordinator left a running run of the
   same graph, algorithm and rate, it adopts that run (same ids, epoch, values, Bootstraps)
   instead of starting a new one. Then it binds the registration ROUTER
   (:mod:`coordinator.registrar`) and waits for the expected count (``register_timeout``).
3. After the bootstrap it only listens: every ``metrics_period`` seconds it mixes the nodes'
   latest reports to a common t (:func:`coordinator.metrics.estimate`), appends the point to
   the history and the metrics file, and, once the error is ``<= eps`` with every node's
   report fresh, publishes ``{"cmd": "stop"}`` on the control topic (re-sent every second)
   and waits for every node's final report.
4. The final reports, mixed to a common t, give the exact final error and mass drift: no
   exchange is in flight any more. The run summary goes to the status topic (retained), the
   metrics file, the ``--json`` file and :class:`~coordinator.state.ClusterState`.

Nodes never depend on the coordinator after the bootstrap: if it dies they keep gossiping,
and a coordinator restarted with the same arguments resumes the run from step 2.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import math
import os
import random
import statistics
import sys
import time
from typing import Any

import numpy as np
import zmq
import zmq.asyncio

from coordinator._groups import single_error
from coordinator.broker import broker_credentials, parse_broker_url, redact_broker_url
from coordinator.config import CoordinatorConfig, prepare
from coordinator.metrics import Snapshot, consistent_cut, estimate, parse_report, update_view
from coordinator.mqtt_link import MqttLink, topics
from coordinator.registrar import RegistrarStats, bound_socket, serve_registrations
from coordinator.registry import Assignment, Plan, Ready, Registry
from coordinator.runlog import RunLog, write_json
from coordinator.state import ClusterState, ErrorPoint, FinalResult, NodeView, RunSummary
from gossip.errors import ConfigError, GossipError, ProtocolError, TransportError

__all__ = ["Coordinator", "CoordinatorConfig", "prepare"]  # the last two from coordinator.config

_RESUME_WAIT = 1.0  # seconds to wait for the broker and a retained status before a fresh run
_STOP_RESEND = 1.0  # seconds between two stop commands while waiting for final reports
_CONFIRM = 3  # fresh points in a row at or below eps before the run counts as converged
_MAX_BACK = 4.0  # mixing back over 2 eta tau <= 4 amplifies rounding errors at most e^4 times
_DIVERGED = 1e3  # an error this many times the initial one means the run has diverged
_SNAPSHOTS_KEPT = 64  # reports kept per node to find a consistent cut


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
        self.bad_reports = 0
        self.resumed = False
        self.bound = asyncio.Event()
        """Set once the registration socket is bound (nodes may register from then on)."""
        self._retained: bytes | None = None
        self._retained_seen = asyncio.Event()
        self._fresh_reports = 0
        self._pace = (0.0, 0)
        self._t_stop: float | None = None
        self._snaps: dict[int, collections.deque[Snapshot]] = {}
        self._link: MqttLink | None = None
        self._topics = topics(config.cluster)
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
                            ),
                            name="registrar",
                        )
                    )
                    self.bound.set()
                    return await self._supervise()
            finally:
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
            async with asyncio.timeout(_RESUME_WAIT):
                await self._link.connected.wait()
                # The broker sends retained messages right after the subscription.
                await self._retained_seen.wait()
        if self._retained is None:
            return
        try:
            status = json.loads(self._retained)
        except ValueError:
            return
        if not self._resumable(status):
            return
        assignment = Assignment.from_dict(status["assignment"])
        self.registry.restore(assignment)
        self.resumed = True
        self._adopt(assignment)
        self.state.set_phase("running", f"resumed run {assignment.run_id}")
        self.log.write("resume", **self._header())
        self._publish_status()

    def _resumable(self, status: Any) -> bool:
        if not isinstance(status, dict):
            return False
        return (
            status.get("phase") in ("running", "stopping")
            and status.get("graph") == self.config.graph
            and status.get("algorithm") == self.plan.params.algorithm.value
            and status.get("rate") == self.plan.rate
            and status.get("expected") == self.plan.expected
            and isinstance(status.get("assignment"), dict)
        )

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
        try:
            report = parse_report(
                topic, payload, self._topics["prefix"], self.plan.expected, self.plan.dim
            )
        except ProtocolError as exc:
            self.bad_reports += 1
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
            snaps = self._snaps[node] = collections.deque(maxlen=_SNAPSHOTS_KEPT)
        snaps.append(Snapshot(report["t"], report["x"], report["z"], report["edges"]))
        self._fresh_reports += 1
        self.state.touch()

    def _evaluate(self) -> tuple[ErrorPoint, bool] | None:
        """Mix a consistent cut of the reports (or the latest ones) to a common t; return the
        point and whether it may decide that eps is reached (reports recent, nobody stopped)."""
        n = self.plan.expected
        histories = [self._snaps.get(k) for k in range(n)]
        if not self.state.initial or any(h is None or not h for h in histories):
            return None
        present = [h for h in histories if h is not None]
        latest = [h[-1] for h in present]
        chosen = latest
        cut = consistent_cut(present, self.plan.topology.edges)
        if cut is not None:
            candidate = [h[i] for h, i in zip(present, cut, strict=True)]
            # At high rates some exchange is always in flight, and the latest consistent cut
            # can lie far back; past a couple of report periods the latest reports (whose mass
            # is then only approximate) describe the present better.
            lag = np.median([s.t for s in latest]) - np.median([s.t for s in candidate])
            if lag <= 2.0 * self.plan.rate * self.plan.metrics_period:
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
        est = estimate(t, x, z, initial, self.plan.params.eta, at=float(np.median(t)))
        # An old report (a slow or dead node) makes the estimate unreliable, so it may not
        # decide that eps is reached.
        spread = float(t.max() - t.min())
        fresh = spread <= 3.0 * self.plan.rate * self.plan.metrics_period and not any(
            v.final for v in self.state.nodes.values()
        )
        point = ErrorPoint(est.t, est.error, est.mass_drift_rel, time.time())
        return point, fresh

    # -- supervision ---------------------------------------------------------------------------

    async def _supervise(self) -> RunSummary | None:
        await self._wait_bootstrap()
        if self._link is None:
            await asyncio.Event().wait()  # nothing to measure: serve registrations until cancelled
        period = self.config.metrics_period
        epoch = self.state.epoch or time.time()
        stop_reason = ""
        below: list[ErrorPoint] = []
        while not stop_reason:
            await asyncio.sleep(period)
            if self._fresh_reports:
                self._fresh_reports = 0
                evaluated = self._evaluate()
                if evaluated is not None:
                    point, fresh = evaluated
                    was = self.state.reached
                    self.state.record(point, may_reach=False)
                    # Reached only after _CONFIRM fresh points in a row at or below eps: one
                    # estimate can dip below it (reports are not simultaneous; ARG's error is
                    # not monotone); t_eps is the first of them.
                    if fresh and point.error <= self.config.until:
                        below.append(point)
                        if len(below) >= _CONFIRM:
                            self.state.mark_reached(below[0].t, below[0].wall)
                    else:
                        below.clear()
                    if fresh and self.state.phase == "running":
                        self._pace = (point.t, self.state.activations())
                    self.log.write(
                        "point",
                        t=point.t,
                        error=point.error,
                        mass_drift_rel=point.mass_drift_rel,
                        activations=self.state.activations(),
                        nodes=len(self.state.nodes),
                        fresh=fresh,
                    )
                    if self.state.reached and not was:
                        self.log.write("reached", t_eps=self.state.t_eps, wall_s=point.wall - epoch)
                        self._publish_status()
            if self.config.keep_running:
                continue
            if self.state.reached:
                stop_reason = "reached"
            elif self._diverged():
                stop_reason = "diverged"
                self.state.message = (
                    f"the error grew to {self.state.error:.3g}, over {_DIVERGED:g} times its "
                    "initial value: the exchanges are too slow for this rate (lower --rate)"
                )
            elif (
                self.config.run_timeout is not None
                and time.time() - epoch > self.config.run_timeout
            ):
                stop_reason = "timeout"
        return await self._stop(stop_reason)

    def _diverged(self) -> bool:
        history = self.state.history
        if len(history) < 2:
            return False
        first, last = history[0].error, history[-1].error
        return not math.isfinite(last) or last > _DIVERGED * max(first, 1e-300)

    async def _stop(self, reason: str) -> RunSummary:
        assert self._link is not None
        self.state.set_phase("stopping", f"stop ({reason}): waiting for the final reports")
        epoch = self.state.epoch if self.state.epoch is not None else time.time()
        self._t_stop = self.plan.rate * (time.time() - epoch)
        self.log.write("stop", reason=reason)
        self._publish_status()
        now = time.monotonic()
        deadline = now + self.config.stop_timeout
        resend = now
        while now < deadline:
            if sum(v.final for v in self.state.nodes.values()) >= self.plan.expected:
                break
            if now >= resend:
                # Re-sent until every node has answered: a node that was reconnecting to the
                # broker when the first one went out must not keep gossiping.
                self._link.send_stop(self.state.run_id)
                resend = now + _STOP_RESEND
            await asyncio.sleep(0.02)
            now = time.monotonic()
        summary = self._finish(reason)
        self._publish_status(summary)
        await self._drain()
        return summary

    def _finish(self, reason: str) -> RunSummary:
        state = self.state
        n = self.plan.expected
        present = [state.nodes[k] for k in range(n) if k in state.nodes]
        final: FinalResult | None = None
        if len(present) == n and state.initial:
            t = np.array([v.t for v in present], dtype=np.float64)
            x = np.array([v.x for v in present], dtype=np.float64)
            z = np.array([v.z for v in present], dtype=np.float64)
            initial = np.array(state.initial, dtype=np.float64)
            eta = self.plan.params.eta
            # Mixed forward to the latest final report: exact, and the mass is exact.
            est = estimate(t, x, z, initial, eta)
            # After the stop no node jumps any more, it only mixes its own pair: the error the
            # run was stopped at is that of the final states mixed back to the stop (long after
            # it, x has drifted to (x + z) / 2). Going back multiplies rounding errors by
            # exp(2 eta tau), so only over a short enough tau.
            if self._t_stop is not None:
                back = float(t.max()) - self._t_stop
                if 0.0 < 2.0 * eta * back <= _MAX_BACK:
                    at_stop = estimate(t, x, z, initial, eta, at=self._t_stop)
                    est = dataclasses.replace(
                        est, t=at_stop.t, error=at_stop.error, values=at_stop.values
                    )
            final = FinalResult(
                t=est.t,
                error=est.error,
                mass_drift_rel=est.mass_drift_rel,
                values=tuple(tuple(float(c) for c in row) for row in est.values),
                mean=tuple(float(c) for c in est.mean),
                complete=all(v.final for v in present),
            )
        epoch = state.epoch or 0.0
        activations = state.activations()
        # Activations completed per unit of t, while the nodes were all initiating (the last
        # fresh point before the stop): 1 means the cluster kept up with the Poisson clocks.
        pace_t, pace_acts = self._pace
        rate_achieved = self.plan.rate * pace_acts / pace_t if pace_t > 0 else 0.0
        p50 = [v.rtt_p50_ms for v in present if v.rtt_p50_ms is not None]
        p99 = [v.rtt_p99_ms for v in present if v.rtt_p99_ms is not None]
        summary = RunSummary(
            run_id=state.run_id,
            reached=state.reached,
            t_eps=state.t_eps,
            wall_s=(state.wall_eps - epoch) if state.wall_eps is not None else None,
            activations=activations,
            rate_achieved=rate_achieved,
            rate_asked=self.plan.rate,
            final_error=final.error if final is not None else None,
            mass_drift_rel=final.mass_drift_rel if final is not None else None,
            rtt_p50_ms=statistics.median(p50) if p50 else None,
            rtt_p99_ms=statistics.median(p99) if p99 else None,
            stop_reason=reason,
        )
        state.final = final
        state.runs.append(summary)
        complete = final is not None and final.complete
        state.set_phase(
            "done",
            f"{'reached' if summary.reached else 'did not reach'} {self.config.until:g}; "
            f"final error {summary.final_error}"
            + ("" if complete else " (some nodes sent no final report)"),
        )
        record = {
            **summary.as_dict(),
            "final_t": final.t if final else None,
            "complete": complete,
            "graph": self.config.graph,
            "algorithm": self.plan.params.algorithm.value,
            "nodes": n,
            "eps": self.config.until,
        }
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
        p = self.plan.params
        return {
            "run_id": self.state.run_id,
            "graph": self.config.graph,
            "cluster": self.config.cluster,
            "algorithm": p.algorithm.value,
            "params": {"eta": p.eta, "c": p.c, "theta": p.theta},
            "quantities": self.state.quantities.as_dict() if self.state.quantities else None,
            "expected": self.plan.expected,
            "rate": self.plan.rate,
            "eps": self.config.until,
            "epoch": self.state.epoch,
        }

    def _publish_status(self, summary: RunSummary | None = None) -> None:
        if self._link is None:
            return
        assignment = self.registry.assignment
        status = {
            **self._header(),
            "phase": self.state.phase,
            "metrics_period": self.plan.metrics_period,
            "broker": redact_broker_url(self.config.broker),
            "bind": self.config.bind,
            "coordinator_pid": os.getpid(),
            "wall": time.time(),
            "assignment": assignment.as_dict() if assignment is not None else None,
            "summary": summary.as_dict() if summary is not None else None,
        }
        try:
            self._link.set_status(status)
        except (TypeError, ValueError) as exc:  # a non-finite float would be a bug here
            raise GossipError(f"cannot encode the coordinator status: {exc}") from exc


def announce_dashboard(url: str) -> None:
    """Tell the user where the dashboard listens (on stderr, beside the progress output)."""
    print(f"dashboard: {url}", file=sys.stderr, flush=True)
