"""Who is in the run: registration, the bootstrap, resuming a run, and the nodes' lifelines.

:class:`Enrollment` is the coordinator's collaborator for the run's members. It owns the
:class:`~coordinator.membership.registry.Registry` (names, addresses, Bootstraps), the registration
server's counters and the :class:`~coordinator.run.roster.Churn` (leaves, deaths, joins), answers
on the registration socket (:func:`coordinator.membership.registrar.serve_registrations`),
including the nodes' beats (:mod:`node.lifeline`), and puts a retained status back when the
coordinator restarts (:meth:`Enrollment.resume`).

The rules it keeps:

* Every change of who is in the run (a bootstrap, a new address, a leave, a death, a join) is
  published in the retained status before anything else depends on it, so that a coordinator
  restarted at any moment measures the members of the run, and gives a restarted joiner its
  Bootstrap back.
* **A node is told its final report is taken (a beat's echo ``"taken"``) only in answer to a
  beat sent after it stopped**: one that carries the report, or one that says the report went
  over MQTT only (``Beat.final_over_mqtt``, a report too large for a beat), once the
  coordinator holds that report. A plain beat is never answered so, even from a node whose
  report the coordinator holds: it may predate the node's stop, and the node would not count
  it. Once every node whose report the coordinator holds was told, :meth:`Enrollment.tell_finals`
  ends, and the registration socket may close.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import zmq.asyncio

from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.machine.interfaces import connect_address
from continuized.coordinator.membership.plan import Assignment, Plan, natural_key
from continuized.coordinator.membership.registrar import RegistrarStats, serve_registrations
from continuized.coordinator.membership.registry import Prepare, Readdressed, Ready, Registry
from continuized.coordinator.membership.security import Security
from continuized.coordinator.run.config import CoordinatorConfig
from continuized.coordinator.run.evaluation import ReportBook
from continuized.coordinator.run.roster import Churn
from continuized.coordinator.run.runlog import RunLog
from continuized.coordinator.run.status import restore_progress, resumable
from continuized.gossip.errors import TransportError
from continuized.gossip.wire.access import account_of
from continuized.gossip.wire.schema import Beat, Message, RegisterError, Stop

__all__ = ["Enrollment", "batch_rule"]


class Enrollment:
    """The run's members, for one coordinator (see the module docstring).

    Parameters
    ----------
    config, plan, state : the coordinator's.
    reports : ReportBook
        Where a final report that comes over a node's lifeline goes.
    runlog : RunLog
        The metrics file (``start``, ``resume`` and ``membership`` records).
    publish : callable()
        Publishes the retained status (called after every change of the members).
    header : callable() -> dict
        The run's header, for the metrics file.
    run_id : str
        The id of a new run.
    """

    def __init__(
        self,
        config: CoordinatorConfig,
        plan: Plan,
        state: ClusterState,
        reports: ReportBook,
        runlog: RunLog,
        publish: Callable[[], None],
        header: Callable[[], dict[str, Any]],
        run_id: str,
    ) -> None:
        self.config = config
        self.plan = plan
        self.state = state
        self.reports = reports
        self.runlog = runlog
        self.publish = publish
        self.header = header
        self.registry = Registry(plan, run_id)
        self.stats = RegistrarStats()
        self._started = time.monotonic()  # the coordinator's start: ready_after_s counts from it
        self.resumed = False
        self.stop_reason = ""
        """Why the run stopped, once it is stopping (the nodes' lifelines are told)."""
        self._beating: set[str] = set()  # names whose lifeline beat in this run
        self._told: set[str] = set()  # names told their final report is taken
        self._told_more = asyncio.Event()  # set whenever one more is told
        self.churn = Churn(plan, state, None, dead_after=config.dead_after, on_event=self._event)
        if config.allow_joins:
            self.registry.on_join = lambda msg, address: self.churn.join(
                msg, address, self.registry.assignment
            )

    # -- the registration socket ---------------------------------------------------------------

    async def serve(self, sock: zmq.asyncio.Socket, authenticated: bool) -> None:
        """Answer registrations, leaves and beats on ``sock`` until cancelled."""
        await serve_registrations(
            sock,
            self.registry,
            self.stats,
            self._on_ready,
            self._on_registered,
            on_prepare=self._on_prepare,
            authenticated=authenticated,
            on_readdress=self._on_readdressed,
            on_leave=lambda name, sender: self.churn.on_leave(name, sender, time.time()),
            on_beat=self.on_beat,
            may_batch=batch_rule(self.plan.security),
        )

    async def wait_bootstrap(self) -> None:
        """Wait until every expected node registered and got its Bootstrap.

        Raises
        ------
        TransportError
            Not every node registered within ``register_timeout``; names those that did.
        """
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
                    f"`gossip node --coordinator {connect_address(self.config.bind)}`"
                )
            await asyncio.sleep(0.05)

    def on_beat(self, beat: Beat) -> Message | None:
        """Answer a node's lifeline (:mod:`node.lifeline`): take its final report, tell it
        the run is over, or echo; ``None`` for another run's node (not ours to stop)."""
        epoch = self.state.epoch
        if epoch is None or abs(beat.epoch - epoch) > 1e-6:
            return None
        self._beating.add(beat.name)
        if beat.final or beat.final_over_mqtt:  # sent after the node stopped (module rule)
            node = self.state.registered.get(beat.name)
            if node is None:
                return RegisterError(f"no node {beat.name!r} in run {self.state.run_id}")
            view = self.state.nodes.get(node)
            if view is not None and view.final:
                # Taken already (over MQTT, or an earlier beat): a final report never changes,
                # and parsing thousands of them again cost the coordinator most of a stop.
                self._tell(beat.name)
                return Beat(beat.name, epoch, Beat.TAKEN)
            if beat.final:
                # The same report as on MQTT, under the node's own topic: whichever way comes
                # first is taken.
                self.reports.ingest(self.reports.topics.state(node), beat.final.encode())
                view = self.state.nodes.get(node)
                if view is None or not view.final:
                    return RegisterError(f"the final report of {beat.name!r} was refused")
                self._tell(beat.name)
                return Beat(beat.name, epoch, Beat.TAKEN)
            # Its report is still on its way over MQTT: answered as any beat, and the node's
            # next one (a second later) is told.
        if self.state.phase in ("stopping", "done"):
            return Stop(epoch, self.stop_reason or "stopped")
        return Beat(beat.name, epoch, "")

    def _tell(self, name: str) -> None:
        self._told.add(name)
        self._told_more.set()

    def untold(self) -> list[str]:
        """The nodes whose final report the coordinator holds but whose lifeline was not told
        so yet: each waits for the answer before its process exits (:mod:`node.lifeline`)."""
        registered, nodes = self.state.registered, self.state.nodes
        pending = []
        for name in self._beating - self._told:
            view = nodes.get(registered.get(name, -1))
            if view is not None and view.final:
                pending.append(name)
        return pending

    async def tell_finals(self, within: float) -> None:
        """Keep answering beats until every node with a final report heard it is taken, at
        most ``within`` seconds: the final reports came over MQTT first, and a node whose
        final beat found the registration socket closed would wait for it in vain."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while self.untold():
                    self._told_more.clear()
                    await self._told_more.wait()

    def _on_registered(self) -> None:
        if not self.registry.bootstrapped:
            # Names only ever append (in arrival order), and most registrations are a node's
            # repeats: add the new ones, not a rebuild per message (quadratic at 4,096 nodes).
            registered = self.state.registered
            if self.registry.count == len(registered):
                return
            names = self.registry.names
            if names[: len(registered)] != list(registered):  # not a pure append: rebuild
                registered.clear()
            for k in range(len(registered), len(names)):
                registered[names[k]] = k
            self.state.message = f"{len(self.state.registered)} of {self.plan.expected} registered"
            self.state.touch()

    def _on_readdressed(self, outcome: Readdressed) -> None:
        # The retained assignment must name the new address: a coordinator that resumes the
        # run, and the neighbours it bootstraps again, would use the dead one.
        self.publish()

    def _on_prepare(self, prepare: Prepare) -> None:
        self.state.message = (
            f"{self.plan.expected} registered; waiting for {len(prepare.drafts)} to set up"
        )
        self.state.touch()

    def _on_ready(self, ready: Ready) -> None:
        self.state.register_messages = (self.stats.registers, self.stats.batches)
        self.state.ready_after_s = time.monotonic() - self._started
        self._adopt(ready.assignment)
        self.state.set_phase(
            "running", f"bootstrapped {self.plan.expected} nodes; t starts at the epoch"
        )
        self.runlog.write("start", **self.header())
        self.publish()

    def _event(self, event: dict[str, Any]) -> None:
        # Retained at once, before anything else: a coordinator restarted from here measures
        # these members.
        self.publish()
        self.runlog.write(
            "membership", event=event["kind"], **{k: v for k, v in event.items() if k != "kind"}
        )

    # -- resuming ------------------------------------------------------------------------------

    def resume(self, status: Any) -> str | None:
        """Adopt the run of a retained ``status`` if it is this coordinator's to resume
        (:func:`coordinator.run.status.resumable`): its ids, epoch, values, Bootstraps, membership
        and progress. Returns ``None`` if it did not, else the stop decision the previous
        coordinator had taken (``""``: none, the run goes on)."""
        if not resumable(status, self.config, self.plan):
            return None
        assignment = Assignment.from_dict(status["assignment"])
        self.registry.restore(assignment)
        self.resumed = True
        self._adopt(assignment)
        self.churn.restore(status.get("membership"))
        stop = restore_progress(self.state, status.get("progress"))
        if status.get("phase") == "stopping" and not stop:
            stop = "resumed-stopping"  # an older coordinator's status: stopping, reason unsaid
        self.state.set_phase("running", f"resumed run {assignment.run_id}")
        self.runlog.write("resume", **self.header(), stop=stop)
        self.publish()
        return stop

    def _adopt(self, assignment: Assignment) -> None:
        state = self.state
        state.run_id = assignment.run_id
        state.epoch = assignment.epoch
        if self.plan.training is not None and self.plan.values is not None:
            # A training assignment holds no models (registry): the coordinator's own draw
            # of them is the same, row by row, as each node's.
            state.initial = [tuple(row) for row in self.plan.values.tolist()]
        else:
            state.initial = list(assignment.initial)
        state.registered = {name: k for k, name in enumerate(assignment.names)}
        state.touch()


def batch_rule(security: Security | None) -> Callable[[str, str], bool] | None:
    """Who may register whom in one batch: the key of a node of a host process (``gossip up
    --nodes-per-process``, secure) may register the nodes of that process, whose keys the
    process holds. Host j holds the j-th block of ids (:func:`gossip.wire.access.host_blocks`,
    as for its MQTT account), and the ids go to the allow-list's names in natural order, as
    :class:`~coordinator.membership.registry.Registry` assigns them. ``None``: no batches (no host
    mode).
    """
    if security is None or security.per_process <= 1:
        return None
    names = sorted(security.allowed, key=natural_key)
    host = {
        name: account_of(k, security.nodes, security.per_process) for k, name in enumerate(names)
    }

    def may(key_name: str, name: str) -> bool:
        return name in host and host[name] == host.get(key_name)

    return may
