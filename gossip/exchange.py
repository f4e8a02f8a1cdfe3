"""The exchange protocol between neighbours, as a sans-IO state machine.

Theory of operation
-------------------
Edge e = {v, w} fires at rate ``P_e`` per unit of t. Its clock is split between its ends: each
end fires it at ``P_e / 2`` and *initiates* the exchange; the other end *serves* it. Both halves
together are the edge's Poisson clock.

1. The initiator v sends ``Request(edge, seq, t_v, x_v, z_v)``: its values at its time ``t_v``.
   ``seq`` counts v's exchanges on that edge (1, 2, ...). ``ack`` is v's watermark: every
   exchange of v on that edge with a number ``<= ack`` is resolved.
2. The server w, on receipt at its time ``T``, mixes v's pair from ``t_v`` to ``T``
   (:func:`gossip.mixing.mix`), computes the flow into v from its own ``x_w(T)``
   (:func:`gossip.jumps.edge_flow`), adds ``-flow`` at ``T`` to its ledger of e, caches the
   answer under ``(edge, seq)`` and replies ``Reply(edge, seq, T, flow)``.
3. v adds ``+flow`` at ``T`` to its ledger of e when the reply arrives, however late
   (:class:`gossip.ledger.Ledger` applies it as ``Phi(now - T) flow``). Both ends apply
   opposite flows at the same ``T``, so the network-wide sums are exact whatever the latency.

Rules for the bad days:

* A repeated request (same ``(edge, seq)``) is answered from the cache, and applied once. A
  request numbered ``<= ack`` that is no longer cached belongs to an exchange already resolved
  on both sides, and is ignored. Both count as duplicates. A repeated reply is ignored.
* A request not answered within the timeout is re-sent under the same ``seq``, carrying the
  initiator's values of the moment: if the first copy never arrived, the server computes
  the jump from fresher values; if it did, the server answers from its cache and the new
  values are ignored. Either way it is applied once. The timeout doubles at each retry up to
  a maximum; the first one adapts to the measured round trips (``srtt + 4 rttvar``, as TCP
  does, sampled only from exchanges answered without a retry), between ``min_timeout`` and
  ``max_timeout``. v never gives up on an exchange that w may have applied:
  it stays pending until a reply or a :class:`~gossip.wire.Nack` settles it. While one of an
  edge's exchanges is stuck (retried :data:`STUCK_RETRIES` times), that edge's ticks at v are
  skipped (and counted), so a dead peer does not pile up pending exchanges.
* Optional back-pressure: a tick is also skipped (and counted) while ``max_in_flight``
  exchanges that v started on that edge are pending (default: no limit). It bounds queues on
  an overloaded machine, but a skipped tick thins the edge's Poisson clock, and accelerated
  gossip run at fewer activations than its ``eta`` assumes is what the paper's misprinted
  ``eta`` does: it diverges. So by default every tick starts an exchange.
* A closed server (its node is stopping) still answers cached exchanges, but answers new ones
  with a Nack: "not applied, and never will be". The initiator then drops the exchange.
* Nothing from a peer changes the state unless it passes :func:`gossip.wire.decode` and comes
  from the neighbour at the other end of the named edge, with a value of the right dimension,
  a time at most ``max_skew`` seconds ahead of ours and a finite result. Everything else is
  counted as rejected and dropped without an answer.
* No lock is held across the network: a node serves and initiates any number of exchanges at
  once; flows simply add up (SPEC section 5).

Holding (``hold=True``, the node's ``--hold-exchanges``): a jump is computed from the
initiator's values sent at ``t_v`` and the server's at ``T``; any other flow at either end in
between, or still in flight towards it, makes the jump stale, and ARG's ``c`` amplifies the
error. Two rules remove most of it, without dropping any tick:

* the node starts no exchange while one of its own is pending (:attr:`Exchanger.busy`); the
  caller's tick waits and fires late, so no activation is lost (a thinned clock diverges);
* while busy, a request from a *higher* id is deferred (:data:`DEFERRED`) and served, at the
  time it is served, by :meth:`Exchanger.release` once nothing of ours is in flight (or forced
  when ours times out). Requests from lower ids are served at once: waits then always go from
  a higher id to a lower one, so they cannot form a cycle, and nothing deadlocks.

A deferred request is served exactly as if it had arrived late, so the rules above (exactly
once, opposite flows at the same ``T``) are unchanged; only fewer jumps see stale values.

Recovery (a restarted node, which gets the same bootstrap back): before gossiping it asks each
neighbour for its ledger on the shared edge (``LedgerRequest``), sets its own to the negative
(``LedgerReply``), and numbers its next exchanges above the highest the neighbour has seen.
Until every edge is recovered it neither initiates nor applies (it Nacks).

The transitions are data (:data:`INITIATOR_TRANSITIONS`, :data:`SERVER_ACTIONS`); the methods
of :class:`Exchanger` look them up and carry them out. Time comes in as ``now``, Unix seconds
on the caller's clock; the protocol's time is ``t = rate * (now - epoch)``.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

from gossip.errors import ConfigError, GossipError, ProtocolError
from gossip.jumps import Flow, edge_flow_values
from gossip.ledger import Ledger
from gossip.mixing import mix_values
from gossip.wire import (
    LedgerReply,
    LedgerRequest,
    Message,
    Nack,
    Reply,
    Request,
    decode,
    encode,
)

__all__ = [
    "DEFERRED",
    "INITIATOR_TRANSITIONS",
    "SERVER_ACTIONS",
    "STUCK_RETRIES",
    "Action",
    "Counters",
    "Event",
    "Exchanger",
    "Link",
    "Outgoing",
    "Phase",
    "ServerCase",
    "TimeBase",
]

FloatArray = NDArray[np.float64]

DEFERRED = b""
"""What :meth:`Exchanger.receive` returns for a request it holds back (``hold`` mode): the
caller keeps the request's route and answers it with what :meth:`Exchanger.release` returns."""

STUCK_RETRIES = 3
"""Retries after which an exchange counts as stuck: its edge's ticks are skipped until it
settles. Fewer would thin the clocks (see below) at every spurious timeout."""


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
"""(phase, event) -> (next phase, action) for an exchange this node initiated."""


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
"""(server open?, case) -> what the server does with a request."""


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
    """A frame to send to a peer's server (a request, or a ledger request)."""

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

    def as_dict(self) -> dict[str, int]:
        """Return the counters as a plain dict."""
        return asdict(self)


@dataclass(slots=True)
class _Pending:
    edge: int
    seq: int
    peer: int
    frame: bytes
    first_sent: float
    timeout: float
    deadline: float
    phase: Phase = Phase.SENT
    retries: int = 0


@dataclass(slots=True)
class _EdgeState:
    link: Link
    next_seq: int = 1  # next number for an exchange this node starts
    pending: dict[int, _Pending] = field(default_factory=dict)
    stuck: int = 0  # how many of ``pending`` have been retried STUCK_RETRIES times or more
    ack_seen: int = 0  # the peer's watermark for the exchanges it starts
    max_seen: int = 0  # the highest seq the peer has sent us
    cache: dict[int, bytes] = field(default_factory=dict)  # seq -> answer frame
    activations: int = 0  # exchanges applied at this end, either side
    recovered: bool = True

    def ack(self) -> int:
        return min(self.pending) - 1 if self.pending else self.next_seq - 1


class Exchanger:
    """One node's side of every exchange: what to send, and what to do with what arrives.

    Parameters
    ----------
    node_id : int
        This node's id.
    links : sequence of Link
        The node's edges, their peers and probabilities.
    ledger : Ledger
        The node's state; its edges must be those of ``links``.
    c : float
        Jump coupling (``0`` for RG).
    timebase : TimeBase
        The shared time.
    timeout, max_timeout : float
        First and largest retry timeout, in seconds (it doubles at each retry). ``timeout``
        is used until round trips have been measured.
    min_timeout : float
        Smallest first timeout once adapted to the measured round trips, in seconds.
    max_skew : float
        Largest accepted gap, in seconds, between a peer's time in a message and ours.
    recover : bool
        Start by recovering the ledger from the neighbours (a restarted node).
    max_in_flight : int or None
        Most exchanges started by this node and pending on one edge; ``None``: no limit.
    hold : bool
        Fidelity mode (see "Holding" in the module header): the caller starts no exchange
        while :attr:`busy`, and requests from higher ids are deferred meanwhile.
    """

    def __init__(
        self,
        node_id: int,
        links: Sequence[Link],
        ledger: Ledger,
        c: float,
        timebase: TimeBase,
        *,
        timeout: float = 0.2,
        max_timeout: float = 2.0,
        min_timeout: float = 0.01,
        max_skew: float = 60.0,
        recover: bool = False,
        max_in_flight: int | None = None,
        hold: bool = False,
    ):
        if sorted(link.edge for link in links) != sorted(ledger.edges):
            raise ConfigError(
                f"links {[link.edge for link in links]} and ledger edges {list(ledger.edges)} "
                "differ"
            )
        if not (timeout > 0 and max_timeout >= timeout):
            raise ConfigError(
                f"need 0 < timeout <= max_timeout, got timeout={timeout!r}, "
                f"max_timeout={max_timeout!r}"
            )
        self.node_id = node_id
        self.ledger = ledger
        self.c = float(c)
        self.eta = ledger.eta
        self.timebase = timebase
        self.timeout = float(timeout)
        self.min_timeout = min(float(min_timeout), self.timeout)
        self._srtt: float | None = None
        self._rttvar = 0.0
        self.max_timeout = float(max_timeout)
        self.max_skew_t = float(max_skew) * timebase.rate
        if max_in_flight is not None and max_in_flight < 1:
            raise ConfigError(f"max_in_flight must be >= 1 or None, got {max_in_flight!r}")
        self.max_in_flight = max_in_flight
        self.counters = Counters()
        self.open = True
        self._edges = {link.edge: _EdgeState(link, recovered=not recover) for link in links}
        self._unrecovered = len(self._edges) if recover else 0
        self._deadlines: list[tuple[float, int, int]] = []  # (deadline, edge, seq), lazy
        self._rtts: deque[float] = deque(maxlen=4096)
        self.hold = hold
        self._in_flight = 0  # exchanges started here and pending, all edges
        self._deferred: deque[Request] = deque()
        self.deferrals = 0  # requests held back while our own exchange was in flight

    # --- introspection -----------------------------------------------------------------------

    @property
    def links(self) -> tuple[Link, ...]:
        """The node's edges."""
        return tuple(state.link for state in self._edges.values())

    @property
    def recovering(self) -> bool:
        """True until every edge's ledger has been recovered from its neighbour."""
        return self._unrecovered > 0

    @property
    def pending(self) -> int:
        """Number of exchanges this node started that are not settled yet."""
        return self._in_flight

    @property
    def busy(self) -> bool:
        """True in ``hold`` mode while an exchange this node started is in flight."""
        return self.hold and self._in_flight > 0

    @property
    def deferred(self) -> int:
        """Number of requests held back, waiting for :meth:`release`."""
        return len(self._deferred)

    def state(self, now: float) -> tuple[float, FloatArray, FloatArray]:
        """Return ``(t, x, z)`` at Unix time ``now``."""
        t = self.timebase.t(now)
        x, z = self.ledger.state(t)
        return t, x, z

    def activations(self) -> dict[int, int]:
        """Return, per peer id, the exchanges applied at this end on the shared edge."""
        return {state.link.peer: state.activations for state in self._edges.values()}

    def current_timeout(self) -> float:
        """Return the first timeout of a new exchange, in seconds (adapted to round trips)."""
        if self._srtt is None:
            return self.timeout
        rto = self._srtt + 4.0 * self._rttvar
        return min(self.max_timeout, max(self.min_timeout, rto))

    def _update_rto(self, rtt: float) -> None:
        # Jacobson/Karels, as TCP (RFC 6298): gains 1/8 and 1/4.
        if self._srtt is None:
            self._srtt, self._rttvar = rtt, rtt / 2.0
        else:
            self._rttvar += 0.25 * (abs(self._srtt - rtt) - self._rttvar)
            self._srtt += 0.125 * (rtt - self._srtt)

    def rtt_ms(self) -> dict[str, float]:
        """Return the p50 and p99 round trip, in milliseconds, of recent exchanges (0 if none)."""
        if not self._rtts:
            return {"p50": 0.0, "p99": 0.0}
        p50, p99 = np.percentile(np.fromiter(self._rtts, dtype=np.float64), [50, 99])
        return {"p50": float(p50) * 1e3, "p99": float(p99) * 1e3}

    # --- initiating --------------------------------------------------------------------------

    def initiate(self, edge: int, now: float) -> Outgoing | None:
        """Start an exchange on ``edge`` (its clock ticked at this end) and return the request.

        Returns ``None`` (and counts a skipped tick) while an exchange on that edge is stuck,
        while ``max_in_flight`` are pending on it, while recovering, or once closed.
        """
        state = self._edges[edge]
        limit = self.max_in_flight
        if (
            state.stuck
            or (limit is not None and len(state.pending) >= limit)
            or not self.open
            or self._unrecovered
        ):
            self.counters.skipped += 1
            return None
        seq = state.next_seq
        request = self._request(state, seq, state.ack(), now)  # ack: before this one
        state.next_seq += 1
        frame = encode(request)
        timeout = self.current_timeout()
        deadline = now + timeout
        state.pending[seq] = _Pending(edge, seq, state.link.peer, frame, now, timeout, deadline)
        self._in_flight += 1
        heapq.heappush(self._deadlines, (deadline, edge, seq))
        self.counters.initiated += 1
        return Outgoing(state.link.peer, frame)

    def _request(self, state: _EdgeState, seq: int, ack: int, now: float) -> Request:
        t = self.timebase.t(now)
        x, z = self.ledger.state_values(t)
        return Request(
            src=self.node_id, edge=state.link.edge, seq=seq, ack=ack, t=t, x=tuple(x), z=tuple(z)
        )

    def next_deadline(self) -> float | None:
        """Return the earliest retry deadline (Unix seconds), or ``None`` if nothing is pending."""
        while self._deadlines:
            deadline, edge, seq = self._deadlines[0]
            pending = self._edges[edge].pending.get(seq)
            if pending is not None and pending.deadline == deadline:
                return deadline
            heapq.heappop(self._deadlines)  # settled or re-armed since: drop the stale entry
        return None

    def expire(self, now: float) -> list[Outgoing]:
        """Return the requests to re-send because their timeout passed by ``now``."""
        out: list[Outgoing] = []
        while (deadline := self.next_deadline()) is not None and deadline <= now:
            _, edge, seq = heapq.heappop(self._deadlines)
            state = self._edges[edge]
            pending = state.pending[seq]
            phase, action = INITIATOR_TRANSITIONS[(pending.phase, Event.TIMEOUT)]
            assert action is Action.RESEND
            pending.retries += 1
            if pending.retries == STUCK_RETRIES:
                state.stuck += 1
            pending.phase = phase
            pending.timeout = min(2.0 * pending.timeout, self.max_timeout)
            pending.deadline = now + pending.timeout
            heapq.heappush(self._deadlines, (pending.deadline, edge, seq))
            self.counters.retried += 1
            pending.frame = encode(self._request(state, seq, state.ack(), now))  # fresher values
            out.append(Outgoing(pending.peer, pending.frame))
        return out

    def abandon_all(self) -> int:
        """Give up on every pending exchange (the node is exiting); return how many there were.

        Each is counted as failed. The peer may have applied some of them: that is the one
        case where the sums can break, and why stopping waits for pending exchanges first.
        """
        count = 0
        for state in self._edges.values():
            count += len(state.pending)
            state.pending.clear()
            state.stuck = 0
        self._deadlines.clear()
        self._in_flight = 0
        self.counters.failed += count
        return count

    def close(self) -> None:
        """Stop initiating, and answer new requests with a Nack (cached ones are still answered)."""
        self.open = False

    # --- recovery ----------------------------------------------------------------------------

    def ledger_requests(self) -> list[Outgoing]:
        """Return a LedgerRequest for every edge not yet recovered (re-send them until done)."""
        return [
            Outgoing(s.link.peer, encode(LedgerRequest(src=self.node_id, edge=e)))
            for e, s in self._edges.items()
            if not s.recovered
        ]

    def give_up_recovery(self) -> list[int]:
        """Stop waiting for the edges not yet recovered (their ledgers stay as they are).

        For a neighbour that never answers. The sums are exact only if that neighbour's
        ledger on the edge was zero. Returns the edges given up on.
        """
        edges = [e for e, s in self._edges.items() if not s.recovered]
        for e in edges:
            self._edges[e].recovered = True
        self._unrecovered = 0
        return edges

    # --- receiving ---------------------------------------------------------------------------

    def receive(self, frame: bytes, now: float) -> bytes | None:
        """Handle one frame from a peer; return the answer to send back to it, if any.

        Never raises on bad input: frames that fail validation or the rules in the module
        header are counted in ``counters.rejected`` and leave the state unchanged.
        """
        try:
            message = decode(frame)
            if (
                self._in_flight
                and self.hold
                and type(message) is Request
                and message.src > self.node_id  # ids order the waits: no cycle, no deadlock
                and self.open
            ):
                self._deferred.append(message)
                self.deferrals += 1
                return DEFERRED
            return self._dispatch(message, now)
        except GossipError:
            self.counters.rejected += 1
            return None

    def release(self, now: float, force: bool = False) -> list[bytes | None]:
        """Serve the deferred requests, in arrival order, once nothing of ours is in flight.

        Returns one answer (or ``None``: no answer) per deferred request, in the order
        :meth:`receive` returned :data:`DEFERRED`; nothing while still busy unless ``force``
        (our own exchange is slow: stop making the neighbours wait).
        """
        if not self._deferred or (self._in_flight and not force):
            return []
        answers: list[bytes | None] = []
        while self._deferred:
            message = self._deferred.popleft()
            try:
                answers.append(self._on_request(message, now))
            except GossipError:
                self.counters.rejected += 1
                answers.append(None)
        return answers

    def _dispatch(self, message: Message, now: float) -> bytes | None:
        if isinstance(message, Request):
            return self._on_request(message, now)
        if isinstance(message, Reply):
            self._on_answer(message, Event.REPLY, now)
            return None
        if isinstance(message, Nack):
            self._on_answer(message, Event.NACK, now)
            return None
        if isinstance(message, LedgerRequest):
            return self._on_ledger_request(message, now)
        if isinstance(message, LedgerReply):
            self._on_ledger_reply(message, now)
            return None
        raise ProtocolError(f"a {message.TYPE} message is not part of the exchange protocol")

    def _edge_from(self, src: int, edge: int) -> _EdgeState:
        state = self._edges.get(edge)
        if state is None or state.link.peer != src:
            raise ProtocolError(
                f"edge {edge} from node {src} is not an edge of node {self.node_id}"
            )
        return state

    def _check_time(self, t: float, now: float) -> float:
        # Only the future is dangerous: moving a flow back from far ahead multiplies by
        # exp(+2 eta tau). A time far in the past (an old retry) is merely late, and exact.
        t_now = self.timebase.t(now)
        if t - t_now > self.max_skew_t:
            raise ProtocolError(
                f"field 't' = {t!r} is ahead of our time {t_now!r} by more than the max skew "
                f"{self.max_skew_t!r} (units of t)"
            )
        return t_now

    def _check_dim(self, name: str, value: tuple[float, ...]) -> None:
        if len(value) != self.ledger.dim:
            raise ProtocolError(
                f"field {name!r} has {len(value)} components; this cluster's dim is "
                f"{self.ledger.dim}"
            )

    def _on_request(self, msg: Request, now: float) -> bytes | None:
        state = self._edge_from(msg.src, msg.edge)
        self._check_dim("x", msg.x)
        t_now = self._check_time(msg.t, now)
        if msg.ack > state.ack_seen:
            state.ack_seen = msg.ack
            # Answers numbered <= ack can never be asked for again.
            for seq in [s for s in state.cache if s <= msg.ack]:
                del state.cache[seq]
        if msg.seq in state.cache:
            case = ServerCase.CACHED
        elif msg.seq <= state.ack_seen:
            case = ServerCase.STALE
        else:
            case = ServerCase.NEW
        action = SERVER_ACTIONS[(self.open and not self._unrecovered, case)]
        if action == "answer":
            self.counters.duplicates += 1
            return state.cache[msg.seq]
        if action == "ignore":
            self.counters.duplicates += 1
            return None
        state.max_seen = max(state.max_seen, msg.seq)
        if action == "nack":
            why = "recovering" if self._unrecovered else "closed"
            answer = encode(Nack(src=self.node_id, edge=msg.edge, seq=msg.seq, reason=why))
        else:
            x_w, _ = self.ledger.state_values(t_now)
            x_v, _ = mix_values(msg.x, msg.z, self.eta, t_now - msg.t)
            dx, dz = edge_flow_values(x_v, x_w, self.c)  # into the initiator v
            self.ledger.add_values(msg.edge, dx, dz, t_now, sign=-1.0)  # raises before change
            answer = encode(
                Reply(
                    src=self.node_id,
                    edge=msg.edge,
                    seq=msg.seq,
                    t=t_now,
                    dx=tuple(dx),
                    dz=tuple(dz),
                )
            )
            state.activations += 1
            self.counters.served += 1
        state.cache[msg.seq] = answer
        return answer

    def _on_answer(self, msg: Reply | Nack, event: Event, now: float) -> None:
        state = self._edge_from(msg.src, msg.edge)
        pending = state.pending.get(msg.seq)
        if pending is None:
            if msg.seq >= state.next_seq:
                raise ProtocolError(f"answer to exchange {msg.seq} on edge {msg.edge}: never sent")
            self.counters.duplicates += 1
            return
        _, action = INITIATOR_TRANSITIONS[(pending.phase, event)]
        if action is Action.APPLY:
            assert isinstance(msg, Reply)
            self._check_dim("dx", msg.dx)
            self._check_time(msg.t, now)
            self.ledger.add_values(msg.edge, msg.dx, msg.dz, msg.t)  # raises before any change
            state.activations += 1
            rtt = now - pending.first_sent
            self._rtts.append(rtt)
            if pending.phase is Phase.SENT:  # Karn: a retried exchange's time is ambiguous
                self._update_rto(rtt)
        else:
            self.counters.failed += 1
        del state.pending[msg.seq]
        self._in_flight -= 1
        if pending.retries >= STUCK_RETRIES:
            state.stuck -= 1

    def _on_ledger_request(self, msg: LedgerRequest, now: float) -> bytes:
        state = self._edge_from(msg.src, msg.edge)
        t_now = self.timebase.t(now)
        total = self.ledger.edge_total(msg.edge, t_now)
        return encode(
            LedgerReply(
                src=self.node_id,
                edge=msg.edge,
                seq=max(state.max_seen, state.ack_seen),
                t=t_now,
                fx=tuple(total.dx.tolist()),
                fz=tuple(total.dz.tolist()),
            )
        )

    def _on_ledger_reply(self, msg: LedgerReply, now: float) -> None:
        state = self._edge_from(msg.src, msg.edge)
        if state.recovered:
            self.counters.duplicates += 1
            return
        self._check_dim("fx", msg.fx)
        self._check_time(msg.t, now)
        total = Flow(-np.asarray(msg.fx), -np.asarray(msg.fz))
        self.ledger.set_edge_total(msg.edge, total, msg.t)
        state.next_seq = max(state.next_seq, msg.seq + 1)
        state.recovered = True
        self._unrecovered -= 1
