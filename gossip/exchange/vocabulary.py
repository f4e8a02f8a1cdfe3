"""The exchange protocol's vocabulary: its transitions as data, and the records it keeps.

:mod:`gossip.exchange.exchanger` states the rules and carries them out; this module only names the
phases, events and actions, the tables between them, and the small records of one node's
protocol state (per edge: what it started and is waiting for, what it answered; per node:
:class:`ExchangeState`, what the exchanger's parts share).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from continuized.gossip.errors import ProtocolError

if TYPE_CHECKING:
    from continuized.gossip.exchange.trace import Trace
    from continuized.gossip.model.ledger import Ledger
    from continuized.gossip.model.mixing import Values
    from continuized.gossip.wire.schema import Frame

__all__ = [
    "INITIATOR_TRANSITIONS",
    "SEQ_WINDOW",
    "SERVER_ACTIONS",
    "STUCK_RETRIES",
    "Action",
    "Counters",
    "EdgeState",
    "Event",
    "ExchangeState",
    "Link",
    "Outgoing",
    "Pending",
    "Phase",
    "ServerCase",
    "Standing",
    "TimeBase",
]

STUCK_RETRIES = 5
"""Retries after which an exchange counts as stuck: the node is released (it serves and starts
other exchanges again) and that edge's ticks are skipped until the exchange settles. With the
first timeout at 10 ms or more, that is 310 ms or more of silence. Fewer would release the
lock on a peer that is merely slow (an overloaded machine), whose late reply then breaks
exactness; more would freeze the node longer behind a dead one."""


SEQ_WINDOW = 1024
"""Largest ``seq - ack`` a request may carry: how far an initiator may number ahead of what it
has settled on an edge. With the lock it is 1 (2 around a released, stuck exchange); without
it, at most ``max_in_flight``. The bound is what keeps a server's reply cache and its
deferred requests at most this long per edge whatever a peer sends: answers numbered
``<= ack`` are forgotten, and no request is numbered beyond ``ack + SEQ_WINDOW``."""


class Phase(StrEnum):
    """Where an exchange started by this node stands."""

    SENT = "sent"
    RETRYING = "retrying"
    DONE = "done"


class Event(StrEnum):
    """What can happen to an exchange started by this node."""

    REPLY = "reply"
    BUSY = "busy"  # refused for now: try the activation again later
    NACK = "nack"  # refused for good: the server is closed or recovering
    TIMEOUT = "timeout"
    WITHDRAW = (
        "withdraw"  # its server's crossing request was served here (gossip.exchange.crossing)
    )


class Action(StrEnum):
    """What the initiator does on an event."""

    APPLY = "apply"  # add +flow at the reply's time, record the round trip
    BACK_OFF = "back_off"  # never applied anywhere: start the activation again after a pause
    ABANDON = "abandon"  # never applied anywhere: forget it, count it as failed
    RESEND = "resend"  # same frame again, longer timeout
    RESTART = "restart"  # never applied anywhere: start the activation again at once


INITIATOR_TRANSITIONS: Mapping[tuple[Phase, Event], tuple[Phase, Action]] = {
    (Phase.SENT, Event.REPLY): (Phase.DONE, Action.APPLY),
    (Phase.SENT, Event.BUSY): (Phase.DONE, Action.BACK_OFF),
    (Phase.SENT, Event.NACK): (Phase.DONE, Action.ABANDON),
    (Phase.SENT, Event.TIMEOUT): (Phase.RETRYING, Action.RESEND),
    (Phase.RETRYING, Event.REPLY): (Phase.DONE, Action.APPLY),
    (Phase.RETRYING, Event.BUSY): (Phase.DONE, Action.BACK_OFF),
    (Phase.RETRYING, Event.NACK): (Phase.DONE, Action.ABANDON),
    (Phase.RETRYING, Event.TIMEOUT): (Phase.RETRYING, Action.RESEND),
    (Phase.SENT, Event.WITHDRAW): (Phase.DONE, Action.RESTART),
    (Phase.RETRYING, Event.WITHDRAW): (Phase.DONE, Action.RESTART),
}
"""(phase, event) -> (next phase, action) for an exchange this node started."""


class ServerCase(StrEnum):
    """How a request stands against the server's cache for its edge."""

    NEW = "new"  # never seen
    CACHED = "cached"  # seen, answer cached
    STALE = "stale"  # numbered <= the initiator's ack and forgotten: resolved long ago


class Standing(StrEnum):
    """Where the server stands when a new request comes in."""

    FREE = "free"  # open, recovered, not in an exchange; no jump after the request's time,
    # or the request may move to our last jump's
    WAIT = "wait"  # in an exchange of its own: the request waits (from that exchange's own
    # peer: if it answered ours already, or is of higher id)
    CROSSING = "crossing"  # in an exchange with the requester, of lower id, which has not
    # answered it: both asked at once; our request is caught up later, or withdrawn
    BUSY = "busy"  # the request cannot move and is older than our last jump or our own
    # exchange, or may have been withdrawn; or it is behind two of our jumps
    CLOSED = "closed"  # stopping, or still recovering its ledger


SERVER_ACTIONS: Mapping[tuple[Standing, ServerCase], str] = {
    (Standing.FREE, ServerCase.NEW): "apply",  # apply -flow at T_s, cache and send the reply
    (Standing.WAIT, ServerCase.NEW): "defer",  # served (or refused) once we are free
    (Standing.CROSSING, ServerCase.NEW): "apply",  # served now, although we are engaged
    (Standing.BUSY, ServerCase.NEW): "busy",  # cache and send a Busy: never applied
    (Standing.CLOSED, ServerCase.NEW): "nack",  # cache and send a Nack: never applied
    **{(standing, ServerCase.CACHED): "answer" for standing in Standing},  # the same answer
    **{(standing, ServerCase.STALE): "ignore" for standing in Standing},  # resolved long ago
}
"""(where the server stands, case) -> what the server does with a request."""


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
    """One edge at this node: its global index, the peer at the other end, ``P_e``, and the
    edge's step ``s_e`` (``1/2`` for gossip; both ends must agree)."""

    edge: int
    peer: int
    prob: float
    step: float = 0.5


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A frame to send to a peer's server (a request or a ledger request)."""

    peer: int
    frame: Frame


@dataclass(slots=True)
class Counters:
    """Event counts of one node, as published in its metrics (contract C3)."""

    initiated: int = 0  # exchanges started
    served: int = 0  # requests applied as the server
    retried: int = 0  # requests re-sent after a timeout
    failed: int = 0  # exchanges abandoned (nacked, or unresolved when stopping)
    rejected: int = 0  # frames refused: malformed, wrong version, unknown peer, bad value
    duplicates: int = 0  # repeated requests or replies, answered or ignored, never re-applied
    skipped: int = 0  # clock ticks skipped: the edge stuck, the node closed or recovering
    waited: int = 0  # ticks that waited for our exchange to settle (fired late, not dropped)
    refused: int = 0  # requests answered Busy: we were in an exchange, or had jumped later
    bounced: int = 0  # our requests answered Busy: the activation is tried again later
    deferred: int = 0  # requests that waited for our exchange to settle
    overdue: int = 0  # of those, refused after waiting their limit (breaks a cycle of waits)
    released: int = 0  # stuck exchanges whose lock was released (their jump may be inexact)
    forged: int = 0  # frames whose src is not the node authenticated on their connection
    moved: int = 0  # neighbours' edges re-routed: they came back on another address
    postponed: int = 0  # requests served at our later L instead of refused (moved exactly)
    crossed: int = 0  # requests served while our own request to their sender was in flight
    caught_up: int = 0  # requests served with the sender's values brought past a jump it made
    # after reading them: serving one of ours, as a crossing request
    withdrawn: int = 0  # our requests dropped, unanswered, when we served a crossing request
    # of their server's that could not move: started again at once

    def as_dict(self) -> dict[str, int]:
        """Return the counters as a plain dict."""
        return asdict(self)


@dataclass(slots=True)
class Pending:
    """An exchange this node started on an edge and waits an answer for.

    ``t`` is the jump time sent; a retry re-sends the same ``frame``, so whichever copy the
    server applies, it applies this jump with the value the initiator had at ``t``: at ``t``,
    or later if ``movable`` (the request carried the initiator's ``z``).
    ``bounces`` counts the Busy answers the activation has had before this request, and
    ``due`` is when its clock rang (units of t; NaN if unknown), so that ``t - due`` is its lag.
    """

    edge: int
    seq: int
    peer: int
    frame: Frame
    t: float
    first_sent: float
    timeout: float
    deadline: float
    phase: Phase = Phase.SENT
    retries: int = 0
    bounces: int = 0
    due: float = math.nan
    movable: bool = False


@dataclass(slots=True)
class EdgeState:
    """The protocol state of one edge at this node."""

    link: Link
    next_seq: int = 1  # next number for an exchange this node starts
    pending: dict[int, Pending] = field(default_factory=dict)
    stuck: int = 0  # how many of ``pending`` have been retried STUCK_RETRIES times or more
    ack_seen: int = 0  # the peer's watermark for what it starts
    max_seen: int = 0  # the highest seq the peer has sent us
    cache: dict[int, Frame] = field(default_factory=dict)  # seq -> answer frame
    activations: int = 0  # exchanges applied at this end, either side
    recovered: bool = True
    # The last two exchanges this node started on the edge and applied (their seqs; 0: none),
    # and the last one's jump into this node, (T, dx, dz): what a crossing request may lack.
    applied: int = 0
    applied_before: int = 0
    applied_jump: tuple[float, Values, Values] | None = None

    def ack(self) -> int:
        """Return this node's watermark on the edge: everything numbered ``<=`` it is settled."""
        return min(self.pending) - 1 if self.pending else self.next_seq - 1

    def lookup(self, seq: int, ack: int) -> ServerCase:
        """Look the peer's request ``seq`` up against the cache, after taking in its ``ack``."""
        if ack > self.ack_seen:
            self.ack_seen = ack
            # Answers numbered <= ack can never be asked for again.
            for old in [s for s in self.cache if s <= ack]:
                del self.cache[old]
        if seq in self.cache:
            return ServerCase.CACHED
        if seq <= self.ack_seen:
            return ServerCase.STALE
        return ServerCase.NEW


@dataclass(slots=True, eq=False)
class ExchangeState:
    """What the parts of one node's :class:`~gossip.exchange.exchanger.Exchanger` share.

    The exchanger owns it and hands it to each part it owns: the initiator
    (:mod:`gossip.exchange.initiating`), the answers to its requests
    (:mod:`gossip.exchange.answers`), the server (:mod:`gossip.exchange.serving`), recovery, parting
    and the view switch. A field is here only if more than one part reads or writes it; what one
    part alone uses is that part's own. The rule that governs ``last`` (``L``) is
    :mod:`gossip.exchange.exchanger`'s.
    """

    node_id: int
    timebase: TimeBase
    ledger: Ledger  # replaced at a view switch (gossip.exchange.switching)
    edges: dict[int, EdgeState]  # the current view's edges
    max_skew_t: float  # largest accepted gap between a peer's time and ours (units of t)
    exclusive: bool  # the lock of gossip.exchange.exchanger; False only shows what it prevents
    trace: Trace | None = None  # exact samples on a grid of times, read before each jump
    counters: Counters = field(default_factory=Counters)
    last: float = -math.inf  # L: the latest time of a jump applied here
    first_wall: float | None = None  # Unix time of the first exchange applied here, either end
    open: bool = True  # False once closing: start nothing, Nack new requests
    unrecovered: int = 0  # edges recovery has not rebuilt yet: Nack, start nothing
    view_start: float = -math.inf  # the current membership view's start (gossip.exchange.switching)
    horizon: float = math.inf  # every jump of the current view has T < horizon

    @property
    def eta(self) -> float:
        """The current view's ``eta`` (the ledger's)."""
        return self.ledger.eta

    def edge_from(self, src: int, edge: int) -> EdgeState:
        """Return the state of ``edge`` if ``src`` is the node at its other end.

        Raises
        ------
        ProtocolError
            ``edge`` is not one of this node's, or ``src`` is not at its other end.
        """
        state = self.edges.get(edge)
        if state is None or state.link.peer != src:
            raise ProtocolError(
                f"edge {edge} from node {src} is not an edge of node {self.node_id}"
            )
        return state

    def check_time(self, t: float, now: float) -> None:
        """Raise :class:`ProtocolError` if a peer's time ``t`` is ahead of ours (at Unix time
        ``now``) by more than the max skew."""
        # Only the future is dangerous: moving a flow back from far ahead multiplies by
        # exp(+2 eta tau). A time far in the past (an old retry) is merely late, and exact.
        t_now = self.timebase.t(now)
        if t - t_now > self.max_skew_t:
            raise ProtocolError(
                f"field 't' = {t!r} is ahead of our time {t_now!r} by more than the max skew "
                f"{self.max_skew_t!r} (units of t)"
            )

    def check_dim(self, name: str, value: Values) -> None:
        """Raise :class:`ProtocolError` if a peer's field ``name`` is not of the ledger's dim."""
        if len(value) != self.ledger.dim:
            raise ProtocolError(
                f"field {name!r} has {len(value)} components; this cluster's dim is "
                f"{self.ledger.dim}"
            )

    def book_jump(self, edge: int, dx: Values, dz: Values, t: float, sign: float = 1.0) -> None:
        """Book ``sign * (dx, dz)`` at t in the ledger (it raises before any change), reading the
        trace's grid times before t first: every jump of either side goes through here."""
        if self.trace is not None:
            self.trace.before_jump(self.ledger, t)
        # A jump's values are a decoded message's (finite: gossip.wire.schema) or the ledger's
        # own flow (an array ledger's is finite, or it raised): no need to read them again.
        self.ledger.add_values(edge, dx, dz, t, sign=sign, finite=True)
