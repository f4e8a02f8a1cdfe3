"""The coordinator's side of churn: leave requests and dead nodes become membership views.

A request ``{"cmd": "leave", "name": NAME}`` (or ``"node": ID``) on
the cluster's membership topic (``gossip node --leave`` sends it in an insecure run), a
:class:`gossip.wire.schema.Leave` over the registration socket (``gossip node --leave --keys DIR``:
in a secured run, taken only from the leaving node's own CURVE key), or a node silent for
``dead_after`` seconds, removes that node: the coordinator computes the next view
(:func:`gossip.exchange.membership.leave_view`: the graph without the node, its quantities and
parameters recomputed as at bootstrap) starting at ``T_e``, a shared time ``lead`` seconds
ahead, and publishes ``{"cmd": "view", "run", "epoch", "view", "change"}`` on the control topic,
repeated every second until a few seconds after ``T_e`` (nodes ignore repeats). From then on
the node counts as departed: the error is measured on the other members, to the mean of their
initial values (:class:`coordinator.figures.state.ClusterState`'s ``departed``). Each change, or a
refused one (the survivors would be disconnected, an unknown name), is one event of the
dashboard's membership timeline. In a secured run a joiner registers with a spare key of the
allow-list (``gossip keys init --spare S``); the view carries its public key (``keys``) so that
its new neighbours admit it. ("View": a *membership epoch*; ``epoch`` is the run's
time origin.)
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.membership.plan import Assignment, Plan
from continuized.coordinator.membership.registry import Known, Outcome, Refused
from continuized.coordinator.mqtt.link import MqttLink
from continuized.coordinator.run.status import restore_membership
from continuized.gossip.errors import GossipError, ProtocolError
from continuized.gossip.exchange.membership import (
    View,
    attach_neighbors,
    join_view,
    leave_view,
    make_view,
)
from continuized.gossip.wire.schema import Bootstrap, Neighbor, Register, decode, encode_bytes

__all__ = ["ATTACH", "LEAD", "RESEND", "Churn"]

log = logging.getLogger(__name__)

LEAD = 1.0
"""Seconds between a change and its view's start: time for the command to reach every node."""

RESEND = 1.0
"""Seconds between two copies of the latest view command."""

ATTACH = 2
"""Members a joining node is attached to, drawn at random (seeded by the run and its id)."""

_RESEND_FOR = 5.0  # seconds after T_e during which the latest view is still repeated


class Churn:
    """Membership changes of one run (see the module docstring).

    Parameters
    ----------
    plan : Plan
        The run's settings (topology, rate, algorithm).
    state : ClusterState
        Where departures and events go.
    link : MqttLink or None
        Where views are published.
    dead_after : float or None
        Seconds without a report after which a node is declared dead (``None``: never).
    lead : float
        Seconds from a change to its view's start.
    on_event : callable(event), optional
        Called with every membership event (the coordinator writes it to the metrics file).
    """

    def __init__(
        self,
        plan: Plan,
        state: ClusterState,
        link: MqttLink | None,
        dead_after: float | None = None,
        lead: float = LEAD,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.plan = plan
        self.state = state
        self.link = link
        self.dead_after = dead_after
        self.lead = lead
        self.on_event = on_event
        self._command: dict[str, Any] | None = None
        self._resend_at = math.inf
        self._resend_until = -math.inf
        self._kept: set[int] = set()  # silent nodes that could not be removed: asked once
        # When this coordinator first counted each registered node that has not reported to it
        # (a node that died while a previous incarnation was down never will).
        self._unheard_since: dict[int, float] = {}
        self._joined: dict[str, Bootstrap] = {}  # by name: a repeated registration gets it back
        self._addresses: dict[int, str] = {}  # joined nodes' addresses, by id
        self._keys: dict[int, str] = {}  # joined nodes' CURVE public keys, by id (secured)

    @property
    def view(self) -> View | None:
        """The latest view published (``None``: none yet, the bootstrap graph holds); kept in
        the state, where the error's measure reads it too."""
        return self.state.view

    def _current(self) -> View:
        if self.state.view is not None:
            return self.state.view
        edges = [(int(u), int(v)) for u, v in self.plan.topology.edges]
        return make_view(0, 0.0, range(self.plan.expected), edges, self.plan.params.algorithm)

    def record(self) -> dict[str, Any]:
        """The roster's part of the retained membership (beside
        :func:`coordinator.run.status.membership_record`): the joiners' Bootstraps (wire frames,
        base64), addresses and keys, and the latest view command while it is repeated."""
        return {
            "joined": {
                name: base64.b64encode(encode_bytes(boot)).decode("ascii")
                for name, boot in self._joined.items()
            },
            "addresses": {str(k): address for k, address in self._addresses.items()},
            "keys": {str(k): key for k, key in self._keys.items()},
            "command": self._command,
            "resend_until": self._resend_until if math.isfinite(self._resend_until) else None,
        }

    def restore(self, record: Any) -> None:
        """Put a restarted coordinator's membership back from the retained ``record``
        (:meth:`record` and :func:`coordinator.run.status.membership_record`): a restarted joiner
        gets its own Bootstrap back, and a view command still due is repeated.

        Raises
        ------
        ProtocolError
            A record that is not the shape :meth:`record` writes.
        """
        restore_membership(self.state, record)
        if not isinstance(record, dict):
            return  # an older coordinator's status: the bootstrap membership
        try:
            for name, frame in (record.get("joined") or {}).items():
                boot = decode(base64.b64decode(frame, validate=True))
                if not isinstance(boot, Bootstrap):
                    raise ProtocolError(f"joiner {name!r}: a {boot.TYPE}, not a bootstrap")
                self._joined[str(name)] = boot
            for k, address in (record.get("addresses") or {}).items():
                self._addresses[int(k)] = str(address)
            for k, key in (record.get("keys") or {}).items():
                self._keys[int(k)] = str(key)
            command, until = record.get("command"), record.get("resend_until")
            if isinstance(command, dict) and isinstance(until, int | float):
                self._command, self._resend_at, self._resend_until = command, 0.0, float(until)
        except (TypeError, ValueError, AttributeError, binascii.Error) as exc:
            raise ProtocolError(f"the retained status's membership is malformed: {exc}") from exc

    def on_request(self, payload: bytes, now: float) -> None:
        """Take a leave request from MQTT (never raises: a bad one is logged, shown as refused).

        In a secured cluster only the coordinator's own account may write this topic (the
        broker's ACL): a node leaves over CURVE instead (:meth:`on_leave`).
        """
        try:
            request = json.loads(payload)
        except ValueError:
            self._event("refused", now, detail=f"not JSON: {payload[:80]!r}")
            return
        if not isinstance(request, dict) or request.get("cmd") != "leave":
            self._event("refused", now, detail=f"unknown request {request!r:.80}; valid: leave")
            return
        node = request.get("node")
        name = request.get("name")
        if isinstance(name, str):
            self._leave_named(name, now)
            return
        if not isinstance(node, int):
            self._event("refused", now, detail=f"a leave names a node or a name: {request!r:.80}")
            return
        self.remove(node, "leave", now)

    def on_leave(self, name: str, sender: str | None, now: float) -> str | None:
        """Take a :class:`gossip.wire.schema.Leave` from the registrar: ``None`` if taken, else why
        not.

        ``sender`` is the name of the CURVE key it came with (``None``: an insecure run); a
        leave of another node than the sender's is refused and shown (a forged leave).
        """
        if sender is not None and sender != name:
            why = f"asked with the key of {sender!r}: a node can only make itself leave"
            self._event("refused", now, name=name, detail=f"forged leave: {why}")
            return why
        return self._leave_named(name, now)

    def _leave_named(self, name: str, now: float) -> str | None:
        node = self.state.registered.get(name)
        if node is None:
            known = ", ".join(sorted(self.state.registered)[:8])
            why = f"no node {name!r}; nodes: {known}"
            self._event("refused", now, name=name, detail=why)
            return why
        if self.state.epoch is None:
            return "the run has not started"
        if node in self.state.departed:
            return None  # a repeated request: already out
        refused: list[str] = []
        self.remove(node, "leave", now, refused)
        return refused[0] if refused else None

    def remove(
        self, node: int, kind: str, now: float, refused: list[str] | None = None
    ) -> View | None:
        """Publish the view without ``node`` (``kind``: leave or dead); ``None`` if refused
        (the reason is appended to ``refused``)."""
        if self.state.epoch is None or node in self.state.departed:
            return None
        if self.state.phase != "running":
            why = _over(self.state.phase)
            self._event("refused", now, node=node, detail=f"{kind} refused: {why}")
            if refused is not None:
                refused.append(why)
            return None
        current = self._current()
        start = max(self.plan.rate * (now + self.lead - self.state.epoch), current.start + 1e-9)
        try:
            new = leave_view(current, node, start)
        except GossipError as exc:
            self._event("refused", now, node=node, detail=str(exc))
            if refused is not None:
                refused.append(str(exc))
            return None
        self.state.departed.add(node)
        # The view first: the event publishes the retained status, which must carry it (a
        # coordinator restarted from a status with the departure but not its view would
        # compute the next change from the bootstrap graph).
        self._publish(new, {"kind": kind, "node": node}, now, {})
        self._event(kind, now, node=node, view=new.number, t=new.start, members=len(new.members))
        return new

    def join(self, msg: Register, address: str | None, assignment: Assignment | None) -> Outcome:
        """Answer a registration under a new name after the bootstrap: the node joins.

        It gets the next id, is attached to :data:`ATTACH` random members, and its Bootstrap
        carries the next view's parameters; the view (with its address) goes to the others.
        A restarted joiner (same name) gets the same Bootstrap back.
        """
        if msg.name in self._joined:
            return Known(self._joined[msg.name])
        now = time.time()
        why = ""
        epoch = self.state.epoch
        if assignment is None or epoch is None:
            why = "the run has not started"
        elif self.state.phase != "running":
            why = _over(self.state.phase)
        elif address is None:
            why = f"address {msg.address!r} has a wildcard host; bind a specific address"
        elif msg.value is None or len(msg.value) != self.plan.dim:
            why = f"a joining node needs its --value ({self.plan.dim} number(s)), got {msg.value}"
        elif self.plan.task is not None:
            why = "joins are for gossip runs only (no --problem)"
        if why or assignment is None or epoch is None or address is None or msg.value is None:
            self._event("refused", now, name=msg.name, detail=f"join refused: {why}")
            return Refused(f"cannot join: {why}")
        current = self._current()
        node = max(self.plan.expected, len(self.state.initial))
        rng = np.random.default_rng([node, int(assignment.epoch)])
        peers = attach_neighbors(current, min(ATTACH, len(current.members)), rng)
        start = max(self.plan.rate * (now + self.lead - epoch), current.start + 1e-9)
        new = join_view(current, node, peers, start)
        addresses = {**dict(enumerate(assignment.addresses)), **self._addresses, node: address}
        sec = self.plan.security
        # Secured: the joiner's key is its name's in the allow-list (the registrar checked it
        # came with that key); its neighbours get it in the view and admit it.
        allowed = {} if sec is None else sec.allowed
        names = {k: name for name, k in self.state.registered.items()}
        neighbors = tuple(
            Neighbor(
                peer,
                addresses[peer],
                edge,
                new.prob(edge),
                key=allowed.get(names.get(peer, ""), ""),
            )
            for edge, peer in new.incident(node)
        )
        boot = Bootstrap(
            node_id=node,
            cluster=self.plan.cluster,
            algorithm=new.algorithm.value,
            eta=new.eta,
            c=new.c,
            theta=new.theta,
            epoch=assignment.epoch,
            rate=self.plan.rate,
            neighbors=neighbors,
            initial_value=tuple(msg.value),
            broker=self.plan.broker if sec is None else sec.node_broker(self.plan.broker, node),
            metrics_period=self.plan.metrics_period,
            dim=self.plan.dim,
            # The run's first n, as every node got: their trace grids
            # (gossip.exchange.trace.trace_step) are computed from it and must be the same grid
            # times.
            n=self.plan.topology.n,
        )
        self._joined[msg.name] = boot
        self._addresses[node] = address
        if msg.name in allowed:
            self._keys[node] = allowed[msg.name]
        self.state.initial.append(tuple(msg.value))
        self.state.registered[msg.name] = node
        self._publish(new, {"kind": "join", "node": node}, now, {str(node): address})
        self._event(
            "join",
            now,
            node=node,
            name=msg.name,
            view=new.number,
            t=new.start,
            members=len(new.members),
            detail=f"attached to {peers}",
        )
        return Known(boot)

    def _publish(
        self, new: View, change: dict[str, Any], now: float, addresses: dict[str, str]
    ) -> None:
        assert self.state.epoch is not None
        self.state.view = new
        self.state.unreach()  # a new mean to reach (only with keep_running can it be reached)
        self._command = {
            "cmd": "view",
            "run": self.state.run_id,
            "epoch": self.state.epoch,
            "view": new.as_dict(),
            "change": change,
            "addresses": {**{str(k): a for k, a in self._addresses.items()}, **addresses},
            "keys": {str(k): key for k, key in self._keys.items()},
        }
        self._resend_at = now
        self._resend_until = self.state.epoch + new.start / self.plan.rate + _RESEND_FOR
        self._repeat(now)

    def _repeat(self, now: float) -> None:
        """Send the latest view command if it is due (it may still be missed)."""
        command, link = self._command, self.link
        due = self._resend_at <= now <= self._resend_until
        if command is not None and link is not None and due:
            link.publish(link.topics.control, command)
            self._resend_at = now + RESEND

    def tick(self, now: float) -> None:
        """Repeat the latest view command while it may still be missed; declare the dead."""
        self._repeat(now)
        link = self.link
        if self.dead_after is None or self.state.phase != "running":
            return
        heard_from = -math.inf
        if link is not None:
            if not link.connected.is_set():
                return  # the broker is away: every node is silent, none is known dead
            heard_from = link.connected_since  # silence before it was the broker's
        nodes = self.state.nodes
        for k in sorted(set(nodes) | set(self.state.registered.values())):
            view = nodes.get(k)
            if view is None:  # registered, never heard by this coordinator: silent from now on
                received = self._unheard_since.setdefault(k, now)
            elif view.final:
                continue
            else:
                received = view.received
            silent = now - max(received, heard_from)
            gone = k in self.state.departed or k in self._kept
            if not gone and silent > self.dead_after:
                log.warning("node %d silent for %.1f s: declared dead", k, silent)
                if self.remove(k, "dead", now) is None:
                    self._kept.add(k)

    def _event(self, kind: str, now: float, **fields: Any) -> None:
        name = fields.pop("name", None)
        node = fields.get("node")
        if name is None and isinstance(node, int):
            name = next((n for n, k in self.state.registered.items() if k == node), None)
        epoch = self.state.epoch
        t_now = None if epoch is None else self.plan.rate * (now - epoch)
        event = {"kind": kind, "wall": now, "t_now": t_now, "name": name, **fields}
        self.state.churn.append(event)
        if self.on_event is not None:
            self.on_event(event)
        self.state.message = f"membership: {kind} {name or node or ''} {fields.get('detail', '')}"
        self.state.touch()
        log.info("membership event: %s", event)


def _over(phase: str) -> str:
    """Why no membership change is taken in ``phase`` (the final reports are being taken)."""
    return (
        f"the run is {phase}: the final values are taken over the current members, "
        "so the membership no longer changes (a node that wants out can just stop now)"
    )
