"""Registration and bootstrap as a small sans-IO state machine (no sockets, no clock).

Theory of operation
-------------------
Nodes send :class:`~gossip.wire.schema.Register` (name, address, optional own value, pid) and
re-send it every few seconds until they get an answer. The registry has two states:

``collecting``
    Each valid registration is recorded under its name (a re-send, or a restarted node with the
    same name, replaces the earlier record) and gets no answer yet (:class:`Waiting`). When the
    expected count is reached and every node is ready, the registry assigns ids (names in
    natural order: ``node-2`` before ``node-10``), fixes the epoch and the initial values,
    builds every node's :class:`~gossip.wire.schema.Bootstrap` and answers all of them at once
    (:class:`Ready`).

    A node that still has to set up for the run registers first not ready (``Register.ready``
    false: it cannot know the run's model, data or its id before the coordinator says them).
    Once the count is reached, such a node gets a draft Bootstrap (:class:`Prepare`:
    ``Bootstrap.draft``, the ids it will have, no epoch), sets up, and registers again, ready.
    The epoch is fixed only when the last node is ready: ``now + start_delay`` then, so that
    no node's clock starts while another still reads its shard or builds its model (eight
    training nodes on two cores took twelve seconds past an epoch fixed at the registration).
    Older nodes register ready.
``bootstrapped``
    A registration under a known name gets that name's Bootstrap again, unchanged
    (:class:`Known`): a restarted node gets its id back. If it registers another address (it
    came back on a new port, or in a new container) the registry records it and rebuilds the
    Bootstraps, so that a neighbour restarted later is sent there (:class:`Readdressed`; the
    caller republishes the assignment). The old incarnation is taken for dead: a live node
    cannot register, since its name's key is its own in a secured cluster. An unknown name,
    or an address another node has, is refused.

A registration is refused (:class:`Refused`, sent as :class:`~gossip.wire.schema.RegisterError`)
when its name is empty, its address is not ``tcp://host:port``, its address is taken by another
name, its value has the wrong dimension, it has no value while the experiment does not choose
them, or the cluster is full. The reason names the bad value and what would be valid.

Everything a Bootstrap depends on is in the run's :class:`~coordinator.membership.plan.Plan`
and :class:`~coordinator.membership.plan.Assignment` (:mod:`coordinator.membership.plan`); a
restarted coordinator rebuilds the very same Bootstraps from the retained status topic
(:meth:`Registry.restore`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from continuized.coordinator.membership.handshakes import handshake_wait, process_of
from continuized.coordinator.membership.plan import Assignment, Plan, build_bootstraps, natural_key
from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.schema import Bootstrap, Register

if TYPE_CHECKING:  # the trainer's imports take a second: a gossip run does not pay them
    pass

__all__ = [
    "Known",
    "Outcome",
    "Prepare",
    "Readdressed",
    "Ready",
    "Refused",
    "Registry",
    "Waiting",
]

_ADDRESS = re.compile(r"^tcp://(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(?P<port>\d{1,5})$")
_WILDCARD_HOSTS = ("0.0.0.0", "*", "[::]")


@dataclass(frozen=True, slots=True)
class Waiting:
    """Recorded; no answer yet (``registered`` of ``expected`` so far)."""

    registered: int
    expected: int


@dataclass(frozen=True, slots=True)
class Ready:
    """The expected count is reached: send every Bootstrap (by name) now."""

    bootstraps: dict[str, Bootstrap]
    assignment: Assignment


@dataclass(frozen=True, slots=True)
class Prepare:
    """The count is reached but these nodes are not ready: send each its draft Bootstrap (by
    name) to set up from; they register again once ready."""

    drafts: dict[str, Bootstrap]


@dataclass(frozen=True, slots=True)
class Known:
    """Already bootstrapped: answer with this (unchanged) Bootstrap."""

    bootstrap: Bootstrap


@dataclass(frozen=True, slots=True)
class Readdressed:
    """Already bootstrapped, now at another address: answer with ``bootstrap`` and publish
    ``assignment`` (it holds the new address; it was ``previous``)."""

    bootstrap: Bootstrap
    assignment: Assignment
    previous: str


@dataclass(frozen=True, slots=True)
class Refused:
    """Answer with a RegisterError carrying ``reason``."""

    reason: str


Outcome: TypeAlias = Waiting | Prepare | Ready | Known | Readdressed | Refused


@dataclass(slots=True)
class _Record:
    address: str
    value: tuple[float, ...] | None
    pid: int
    ready: bool = True


@dataclass(slots=True)
class Registry:
    """The registration state machine of one run (see the module docstring)."""

    plan: Plan
    run_id: str
    _records: dict[str, _Record] = field(default_factory=dict)
    # address -> name of the records: a registration checks its address in O(1), not by a scan
    # of every record (quadratic over a start-up where each node repeats its registration).
    _by_address: dict[str, str] = field(default_factory=dict)
    _assignment: Assignment | None = None
    _bootstraps: dict[str, Bootstrap] = field(default_factory=dict)
    # The draft Bootstraps, built once the count is reached (the names are then fixed, and so
    # are the ids); a draft only says what to set up, so a later change of address leaves it.
    _drafts: dict[str, Bootstrap] = field(default_factory=dict)
    _unready: set[str] = field(default_factory=set)  # the names whose ready is awaited
    on_join: Callable[[Register, str | None], Outcome] | None = None
    """After the bootstrap, what answers a new name (a join, :mod:`coordinator.run.roster`)."""
    closed: bool = False
    """Set once the run stops: a known name registering again (a standing node, done with this
    run) gets its Bootstrap back unchanged, never a new address; it waits for the next run."""

    @property
    def bootstrapped(self) -> bool:
        """True once every node has been assigned its id and Bootstrap."""
        return self._assignment is not None

    @property
    def assignment(self) -> Assignment | None:
        """The assignment, once bootstrapped."""
        return self._assignment

    @property
    def count(self) -> int:
        """How many names have registered so far (all of them once bootstrapped)."""
        return len(self._assignment.names) if self._assignment is not None else len(self._records)

    @property
    def names(self) -> list[str]:
        """Names registered so far, in arrival order (by id once bootstrapped)."""
        if self._assignment is not None:
            return list(self._assignment.names)
        return list(self._records)

    def restore(self, assignment: Assignment) -> None:
        """Adopt an earlier coordinator's ``assignment`` (same plan): answer as it would have.

        Raises
        ------
        ConfigError
            The assignment does not fit the plan (another node count or dimension).
        """
        if len(assignment.names) != self.plan.expected:
            raise ConfigError(
                f"the retained run has {len(assignment.names)} nodes but this coordinator "
                f"expects {self.plan.expected}"
            )
        self._assignment = assignment
        self.run_id = assignment.run_id
        self._bootstraps = dict(
            zip(assignment.names, build_bootstraps(self.plan, assignment), strict=True)
        )

    def register(self, msg: Register, now: float, peer_host: str | None = None) -> Outcome:
        """Handle one registration received at Unix time ``now``.

        Parameters
        ----------
        msg : Register
            The node's registration.
        now : float
            Unix time; the epoch is ``now + plan.start_delay`` (and, secure, the handshakes'
            wait) when this completes the count of ready nodes.
        peer_host : str, optional
            The IP the message came from, used in place of a wildcard host (``0.0.0.0``) in the
            node's address.
        """
        if self._assignment is not None:
            known = self._bootstraps.get(msg.name)
            if known is not None:
                return self._register_again(msg, known, peer_host)
            if self.on_join is not None:
                return self.on_join(msg, self._resolve(msg.address, peer_host))
            return Refused(
                f"name {msg.name!r} is not part of this cluster: all {self.plan.expected} nodes "
                f"registered already ({_preview(self._assignment.names)})"
            )
        problem = self._check(msg)
        if problem:
            return Refused(problem)
        address = self._resolve(msg.address, peer_host)
        if address is None:
            return Refused(
                f"address {msg.address!r} has a wildcard host and the coordinator cannot tell "
                "the node's IP; bind a specific address, e.g. tcp://10.0.0.5:7000"
            )
        owner = self._by_address.get(address)
        if owner is not None and owner != msg.name:
            return Refused(f"address {address!r} is already registered by node {owner!r}")
        if msg.name not in self._records and len(self._records) >= self.plan.expected:
            return Refused(
                f"the cluster is full: {self.plan.expected} nodes registered already "
                f"({_preview(list(self._records))})"
            )
        before = self._records.get(msg.name)
        if before is not None and before.address != address:
            del self._by_address[before.address]  # registered again from elsewhere
        self._records[msg.name] = _Record(address, msg.value, msg.pid, msg.ready)
        self._by_address[address] = msg.name
        if len(self._records) < self.plan.expected:
            return Waiting(len(self._records), self.plan.expected)
        if not self._drafts:  # the count is reached: the names, and so the ids, are fixed
            if all(record.ready for record in self._records.values()):
                return self._complete(now)  # every node ready already (older nodes)
            draft = self._assign(Bootstrap.DRAFT_EPOCH)
            boots = build_bootstraps(self.plan, draft)
            self._drafts = dict(zip(draft.names, boots, strict=True))
            self._unready = {n for n, r in self._records.items() if not r.ready}
            return Prepare({name: self._drafts[name] for name in sorted(self._unready)})
        if not msg.ready:  # a re-send, or a node restarted while it set up: set up (again)
            self._unready.add(msg.name)
            return Prepare({msg.name: self._drafts[msg.name]})
        self._unready.discard(msg.name)
        if self._unready:
            return Waiting(self.plan.expected - len(self._unready), self.plan.expected)
        return self._complete(now)

    # -- internals -----------------------------------------------------------------------------

    def _register_again(
        self, msg: Register, known: Bootstrap, peer_host: str | None
    ) -> Known | Readdressed | Refused:
        # A restarted node: same id, same bootstrap, perhaps a new address (a new port, a new
        # container). Its value is ignored: the run's initial values are fixed.
        assignment = self._assignment
        assert assignment is not None
        if _ADDRESS.match(msg.address) is None:
            return Refused(
                f"address {msg.address!r} is not valid; expected tcp://host:port, "
                "e.g. tcp://127.0.0.1:7000"
            )
        address = self._resolve(msg.address, peer_host)
        previous = assignment.addresses[known.node_id]
        if address is None or address == previous or self.closed:
            return Known(known)  # a wildcard we cannot resolve: the address it had
        for name, other in zip(assignment.names, assignment.addresses, strict=True):
            if other == address and name != msg.name:
                return Refused(f"address {address!r} is already registered by node {name!r}")
        addresses = list(assignment.addresses)
        addresses[known.node_id] = address
        self.restore(replace(assignment, addresses=tuple(addresses)))
        assert self._assignment is not None
        return Readdressed(self._bootstraps[msg.name], self._assignment, previous)

    def _check(self, msg: Register) -> str:
        if not msg.name.strip() or len(msg.name) > 200:
            return f"node name {msg.name!r} is not valid; use 1 to 200 characters, e.g. node-3"
        if _ADDRESS.match(msg.address) is None:
            return (
                f"address {msg.address!r} is not valid; expected tcp://host:port, "
                "e.g. tcp://127.0.0.1:7000"
            )
        if msg.value is not None:
            if not all(math.isfinite(v) for v in msg.value):
                return f"value {list(msg.value)!r} of node {msg.name!r} is not finite"
            if len(msg.value) != self.plan.dim:
                return (
                    f"value of node {msg.name!r} has {len(msg.value)} component(s) but this "
                    f"cluster's values have {self.plan.dim} (coordinator --dim)"
                )
        elif self.plan.values is None:
            return (
                f"node {msg.name!r} registered without a value, and the coordinator does not "
                "choose them; start the node with --value V, or the coordinator with "
                "--values onehot|gaussian:SEED|uniform:SEED|file:PATH"
            )
        return ""

    @staticmethod
    def _resolve(address: str, peer_host: str | None) -> str | None:
        match = _ADDRESS.match(address)
        assert match is not None  # checked by _check
        host = match.group("host")
        if host not in _WILDCARD_HOSTS:
            return address
        if not peer_host:
            return None
        shown = f"[{peer_host}]" if ":" in peer_host else peer_host
        return f"tcp://{shown}:{match.group('port')}"

    def _complete(self, now: float) -> Ready:
        delay = self.plan.start_delay
        if self.plan.security is not None:
            names = sorted(self._records, key=natural_key)
            records = [self._records[name] for name in names]
            delay += handshake_wait(
                self.plan.topology.edges, [process_of(r.address, r.pid) for r in records]
            )
        assignment = self._assign(now + delay)
        self.restore(assignment)
        self._drafts.clear()
        return Ready(dict(self._bootstraps), assignment)

    def _assign(self, epoch: float) -> Assignment:
        """The ids (names in natural order), addresses and initial values of the records."""
        names = sorted(self._records, key=natural_key)
        if self.plan.training is not None:
            # Each node draws its own model (node.learner): neither the Bootstraps nor the
            # retained assignment carry n models of any size (the coordinator keeps them,
            # plan.values).
            initial: tuple[tuple[float, ...], ...] = tuple(() for _ in names)
        elif self.plan.values is not None:
            values = np.asarray(self.plan.values, dtype=np.float64).reshape(len(names), -1)
            initial = tuple(tuple(float(c) for c in row) for row in values)
        else:
            initial = tuple(_value(self._records[name].value) for name in names)
        return Assignment(
            run_id=self.run_id,
            epoch=epoch,
            names=tuple(names),
            addresses=tuple(self._records[name].address for name in names),
            initial=initial,
        )


def _value(value: tuple[float, ...] | None) -> tuple[float, ...]:
    assert value is not None  # _check refuses a missing value when the plan has none
    return tuple(float(v) for v in value)


def _preview(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")
