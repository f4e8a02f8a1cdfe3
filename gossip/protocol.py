"""The exchange protocol's vocabulary: its transitions as data, and the records it keeps.

:mod:`gossip.exchange` states the rules and carries them out; this module only names the
phases, events and actions, the tables between them, and the small records of one node's
protocol state (per edge: what it started and is waiting for, what it answered).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum

__all__ = [
    "INITIATOR_TRANSITIONS",
    "SERVER_ACTIONS",
    "STUCK_RETRIES",
    "Action",
    "Counters",
    "EdgeState",
    "Event",
    "Link",
    "Outgoing",
    "Pending",
    "Phase",
    "ServerCase",
    "TimeBase",
]

STUCK_RETRIES = 3
"""Retries after which an exchange counts as stuck: its edge's ticks are skipped until it
settles. Fewer would thin the clocks at every spurious timeout."""


class Phase(StrEnum):
    """Where an exchange started by this node stands."""

    SENT = "sent"
    RETRYING = "retrying"
    DONE = "done"


class Event(StrEnum):
    """What can happen to an exchange started by this node."""

    REPLY = "reply"
    NACK = "nack"
    TIMEOUT = "timeout"


class Action(StrEnum):
    """What the initiator does on an event."""

    APPLY = "apply"  # add +flow at the server's time, record the round trip
    ABANDON = "abandon"  # never applied anywhere: forget it, count it as failed
    RESEND = "resend"  # same frame again, longer timeout


INITIATOR_TRANSITIONS: Mapping[tuple[Phase, Event], tuple[Phase, Action]] = {
    (Phase.SENT, Event.REPLY): (Phase.DONE, Action.APPLY),
    (Phase.SENT, Event.NACK): (Phase.DONE, Action.ABANDON),
    (Phase.SENT, Event.TIMEOUT): (Phase.RETRYING, Action.RESEND),
    (Phase.RETRYING, Event.REPLY): (Phase.DONE, Action.APPLY),
    (Phase.RETRYING, Event.NACK): (Phase.DONE, Action.ABANDON),
    (Phase.RETRYING, Event.TIMEOUT): (Phase.RETRYING, Action.RESEND),
}
"""(phase, event) -> (next phase, action) for an exchange (or a correction) this node started."""


class ServerCase(StrEnum):
    """How a request stands against the server's cache for its edge."""

    NEW = "new"  # never seen
    CACHED = "cached"  # seen, answer cached
    STALE = "stale"  # numbered <= the initiator's ack and forgotten: resolved long ago


SERVER_ACTIONS: Mapping[tuple[bool, ServerCase], str] = {
    (True, ServerCase.NEW): "apply",  # open: apply -flow, cache and send the reply
    (False, ServerCase.NEW): "nack",  # closed or recovering: cache and send a Nack
    (True, ServerCase.CACHED): "answer",  # send the cached answer again
    (False, ServerCase.CACHED): "answer",
    (True, ServerCase.STALE): "ignore",
    (False, ServerCase.STALE): "ignore",
}
"""(server open?, case) -> what the server does with a request (or a correction)."""


@dataclass(frozen=True, slots=True)
class TimeBase:
    """The shared time: ``t = rate * (now - epoch)``, ``now`` and ``epoch`` in Unix seconds."""

    epoch: float
    rate: float

    def t(self, now: float) -> float:
        """Return the time t (in activations of the whole network) at Unix time ``now``."""
        return self.rate * (now - self.epoch)

    def wall(self, t: float) -> float:
        """Return the Unix time at which the shared time is ``t``."""
        return self.epoch + t / self.rate


@dataclass(frozen=True, slots=True)
class Link:
    """One edge at this node: its global index, the peer at the other end, and ``P_e``."""

    edge: int
    peer: int
    prob: float


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A frame to send to a peer's server (a request, a correction, or a ledger request)."""

    peer: int
    frame: bytes


@dataclass(slots=True)
class Counters:
    """Event counts of one node, as published in its metrics (contract C3)."""

    initiated: int = 0  # exchanges started
    served: int = 0  # requests applied as the server
    retried: int = 0  # requests re-sent after a timeout
    failed: int = 0  # exchanges abandoned (nacked, or unresolved when stopping)
    rejected: int = 0  # frames refused: malformed, wrong version, unknown peer, bad value
    duplicates: int = 0  # repeated requests or replies, answered or ignored, never re-applied
    skipped: int = 0  # clock ticks skipped: the edge stuck or busy, the node closed
    corrections: int = 0  # correction messages sent (first copies), one per edge per pass
    corrected: int = 0  # jump inputs corrected (items in those messages)
    late: int = 0  # flows older than the correction horizon: applied, inputs not corrected
    forged: int = 0  # frames whose src is not the node authenticated on their connection

    def as_dict(self) -> dict[str, int]:
        """Return the counters as a plain dict."""
        return asdict(self)


@dataclass(slots=True)
class Pending:
    """Something this node sent on an edge and waits an answer for: an exchange or a correction.

    An exchange keeps the values it sent (``t_sent``, ``x_sent``, ``z_sent``): with
    corrections on, retries re-send them unchanged, so the initiator knows the exact input the
    server used. A correction keeps its items ``(jid, t, d)``, applied here once acknowledged.
    """

    edge: int
    seq: int
    peer: int
    frame: bytes
    first_sent: float
    timeout: float
    deadline: float
    phase: Phase = Phase.SENT
    retries: int = 0
    t_sent: float = 0.0
    x_sent: list[float] = field(default_factory=list)
    z_sent: list[float] = field(default_factory=list)
    items: list[tuple[int, float, list[float]]] | None = None  # a correction's

    @property
    def is_correction(self) -> bool:
        """True for a correction, False for an exchange."""
        return self.items is not None


@dataclass(slots=True)
class EdgeState:
    """The protocol state of one edge at this node."""

    link: Link
    next_seq: int = 1  # next number for an exchange or correction this node starts
    pending: dict[int, Pending] = field(default_factory=dict)
    stuck: int = 0  # how many of ``pending`` have been retried STUCK_RETRIES times or more
    ack_seen: int = 0  # the peer's watermark for what it starts
    max_seen: int = 0  # the highest seq the peer has sent us
    cache: dict[int, bytes] = field(default_factory=dict)  # seq -> answer frame
    activations: int = 0  # exchanges applied at this end, either side
    recovered: bool = True

    def ack(self) -> int:
        """Return this node's watermark on the edge: everything numbered ``<=`` it is settled."""
        return min(self.pending) - 1 if self.pending else self.next_seq - 1
