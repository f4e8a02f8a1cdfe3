"""The exchange protocol between neighbours, as a sans-IO state machine: exact jumps by design.

Theory of operation
-------------------
Edge e = {v, w} fires at rate ``P_e`` per unit of t. Its clock is split between its ends: each
end fires it at ``P_e / 2`` and *initiates* the exchange; the other end *serves* it. A jump
must use both ends' values at one time T (SPEC section 4; in general the exchanged values
``u = g(x)`` of SPEC section 6), as the sequential model does. The rule that gives this:

**The rule.** Each node holds a lock: it is *engaged* from the moment it starts an exchange
until that exchange is settled, and it keeps ``L``, the latest time of a jump it applied.

1. A tick of edge e at v: if v is engaged, the tick waits (in arrival order,
   :mod:`gossip.waiting`) and fires when v is free: late, never dropped. Once free, v engages,
   takes the jump time ``T = max(t(now), L_v)``, computes ``u_v(T)`` from its ledger and sends
   ``Request(edge, seq, T, u_v)``.
2. The server w refuses, with a :class:`~gossip.wire.Busy`, if it is engaged or if
   ``L_w > T``. Otherwise it computes ``u_w(T)`` from its ledger, applies ``-flow`` at T
   (:func:`gossip.jumps.edge_flow`, with the edge's step), sets ``L_w = T`` and replies
   ``Reply(edge, seq, T, flow)``. Either answer is cached under ``(edge, seq)``, so a delayed
   duplicate of the request gets the same answer and can never be applied later.
3. v applies ``+flow`` at T when the reply comes (late application is exact, SPEC section 5),
   sets ``L_v = T`` and is free. On a Busy it is free too, and tries the activation again
   after a random pause of the order of a round trip, as a new request (new seq, new T, fresh
   ``u_v``); meanwhile it serves others and starts its other waiting ticks.

**Why it is exact (sketch).** Claim: every node applies its jumps in non-decreasing order of
their times. A node applies a jump either as a server, at a T it accepted only if ``T >= L``,
or as an initiator at a T it chose ``>= L``; and while its own exchange is in flight it
applies nothing else (it refuses every request, starts nothing). So each node's ledger,
read at a jump's T, holds exactly the node's jumps before T: ``u_v(T)`` and ``u_w(T)`` are
the values the sequential process has just before that jump, whatever the latencies. The
jumps, sorted by T (ties in the order the nodes applied them, which both ends agree on),
are then a sequential run of the model, and the network's states equal its replay: live and
simulated curves differ only by *when* the jumps are (ticks fired late, refused ones tried
again later), never by what a jump does. Mass stays exact: opposite flows at the same T.

**No deadlock, no starvation.** Nobody ever waits for a locked node: a refusal is immediate,
so there is no chain of waits to close into a cycle. Two nodes that refuse each other try
again after independent random pauses (doubling with each refusal, :func:`~gossip.waiting.
backoff_delay`), so one of them goes first with probability bounded away from 0. Refusals
and retries are counted (``counters.refused``, ``counters.bounced``, ``counters.waited``).

Rules for the bad days:

* Lost messages: a request not answered within the timeout is re-sent as the *same frame*
  (same seq, T and ``u_v``: v's state has not changed meanwhile, it is engaged). The server
  applies it once (its cache), or refuses it once. The timeout doubles at each retry up to a
  maximum; the first one adapts to the measured round trips (``srtt + 4 rttvar``, sampled
  only from exchanges answered without a retry), between ``min_timeout`` and ``max_timeout``.
  A request numbered ``<= ack`` (v's watermark) and no longer cached is ignored.
* A peer silent for :data:`~gossip.protocol.STUCK_RETRIES` retries must not freeze its
  neighbour: the lock is *released* (``counters.released``), the node serves and initiates
  again, the exchange stays pending (and retried) so that if the peer applied it, its reply
  is still applied and the sums stay exact; that edge's ticks are skipped until it settles.
  Exactness then holds only for exchanges answered in time: a reply to a released exchange
  is applied at its own T, possibly before jumps made since.
* Clock skew: T may be a little ahead of the server's clock, which is fine (the ledger mixes
  forward in closed form); a T more than ``max_skew`` seconds ahead is rejected, and so is a
  new request more than ``max_skew`` behind (its state would be mixed back, by an
  ``exp(+2 eta tau)`` that overflows).
* A closed server (its node is stopping) or one still recovering answers new requests with a
  :class:`~gossip.wire.Nack` ("not applied, and never will be"); the initiator drops them.
* Nothing from a peer changes the state unless it passes :func:`gossip.wire.decode` and comes
  from the neighbour at the other end of the named edge, with a value of the right dimension
  and a finite result. Everything else is counted as rejected and dropped without an answer.
* ``exclusive=False`` turns the lock off (no waiting, no refusal): the server then reads its
  state at T even if it jumped after T. That is not exact; it exists to show the difference.

Recovery (a restarted node, which gets the same bootstrap back): before gossiping it asks each
neighbour for its ledger on the shared edge (``LedgerRequest``), sets its own to the negative
(``LedgerReply``, taken at a time after every jump the neighbour made), numbers its next
exchanges above the highest the neighbour has seen, and takes the latest of those times as
its ``L``. Until every edge is recovered it neither initiates nor applies (it Nacks).

The transitions are data (:data:`INITIATOR_TRANSITIONS`, :data:`SERVER_ACTIONS`, in
:mod:`gossip.protocol`); the methods of :class:`Exchanger` look them up and carry them out.
The waiting activations are :mod:`gossip.waiting`, the retry timer :mod:`gossip.rto`. Time
comes in as ``now``, Unix seconds on the caller's clock; the protocol's time is
``t = rate * (now - epoch)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from gossip.errors import ConfigError, GossipError, LocalError, ProtocolError
from gossip.jumps import edge_flow_values
from gossip.ledger import Ledger
from gossip.protocol import (
    INITIATOR_TRANSITIONS,
    SERVER_ACTIONS,
    STUCK_RETRIES,
    Action,
    Counters,
    EdgeState,
    Event,
    Link,
    Outgoing,
    Pending,
    Phase,
    Standing,
    TimeBase,
)
from gossip.recovery import apply_ledger_reply, ledger_reply
from gossip.rto import RetrySchedule, RetryTimer
from gossip.waiting import Activation, Waiting, backoff_delay
from gossip.wire import (
    Busy,
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
    "INITIATOR_TRANSITIONS",
    "SERVER_ACTIONS",
    "STUCK_RETRIES",
    "Action",
    "Counters",
    "Event",
    "ExchangeValue",
    "Exchanger",
    "Link",
    "Outgoing",
    "Phase",
    "Standing",
    "TimeBase",
]

FloatArray = NDArray[np.float64]

ExchangeValue = Callable[[FloatArray], ArrayLike]
"""Maps a node's first variable (``x``, or ``y`` in SPEC section 6) at T to the value it
exchanges, ``u``, of the same dimension. The default is the identity (gossip)."""


class Exchanger:
    """One node's side of every exchange: what to send, and what to do with what arrives.

    Parameters
    ----------
    node_id : int
        This node's id.
    links : sequence of Link
        The node's edges, their peers, probabilities and steps.
    ledger : Ledger
        The node's state; its edges must be those of ``links``.
    c : float
        Jump coupling of the second variable (``0`` for RG).
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
        (With the lock only a released, stuck exchange can be pending beside a new one.)
    exchange_value : callable or None
        ``u = g(x)``, see :data:`ExchangeValue`; ``None``: ``u = x``.
    exclusive : bool
        The lock of the module header. ``False`` is for showing what it prevents.
    rng : numpy Generator, int or None
        Randomness of the back-off pauses (a seed; ``None``: seeded by ``node_id``).
    backoff : float
        Pause scale, in seconds, before a round trip is measured (then the smoothed one).
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
        exchange_value: ExchangeValue | None = None,
        exclusive: bool = True,
        rng: np.random.Generator | int | None = None,
        backoff: float = 0.001,
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
        if max_in_flight is not None and max_in_flight < 1:
            raise ConfigError(f"max_in_flight must be >= 1 or None, got {max_in_flight!r}")
        if not (math.isfinite(backoff) and backoff > 0):
            raise ConfigError(f"backoff must be > 0 seconds, got {backoff!r}")
        self.node_id = node_id
        self.ledger = ledger
        self.c = float(c)
        self.eta = ledger.eta
        self.timebase = timebase
        self.timeout = float(timeout)
        self.max_timeout = float(max_timeout)
        self._timer = RetryTimer(self.timeout, min_timeout, self.max_timeout)
        self.min_timeout = self._timer.low
        self.max_skew_t = float(max_skew) * timebase.rate
        self.max_in_flight = max_in_flight
        self.exclusive = exclusive
        self.counters = Counters()
        self.open = True
        self.initiating = True
        self._edges = {link.edge: EdgeState(link, recovered=not recover) for link in links}
        self._unrecovered = len(self._edges) if recover else 0
        self._deadlines = RetrySchedule(lambda edge, seq: self._edges[edge].pending.get(seq))
        self._in_flight = 0  # exchanges started here and pending, all edges
        self._engaged: Pending | None = None  # the exchange holding the lock
        self._last = -math.inf  # L: the latest time of a jump applied here
        self._waiting = Waiting()
        self._outbox: list[Outgoing] = []
        self._value = exchange_value
        self._rng = np.random.default_rng(node_id if rng is None else rng)
        self._backoff = float(backoff)

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
    def engaged(self) -> bool:
        """True while an exchange this node started holds its lock."""
        return self._engaged is not None

    @property
    def waiting(self) -> int:
        """Number of activations owed: ticks waiting for the lock, refused ones backing off."""
        return len(self._waiting)

    @property
    def last_jump_time(self) -> float:
        """``L``: the latest time (units of t) of a jump applied here; ``-inf`` before any."""
        return self._last

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
        return self._timer.timeout()

    def rtt_ms(self) -> dict[str, float]:
        """Return the p50 and p99 round trip, in milliseconds, of recent exchanges (0 if none)."""
        return self._timer.percentiles_ms()

    def take_outgoing(self) -> list[Outgoing]:
        """Return (and forget) the requests started since the last call: waiting ticks that
        started when the lock was freed by :meth:`receive`. Send them after each call."""
        out, self._outbox = self._outbox, []
        return out

    def _exchanged(self, t: float) -> list[float]:
        """Return ``u(t) = g(x(t))``, the value this node exchanges at time ``t``."""
        x, _ = self.ledger.state_values(t)
        if self._value is None:
            return x
        u = np.asarray(self._value(np.array(x, dtype=np.float64)), dtype=np.float64).ravel()
        if u.shape != (self.ledger.dim,) or not np.all(np.isfinite(u)):
            raise LocalError(
                f"exchange_value returned {u!r}; it must be {self.ledger.dim} finite numbers"
            )
        return u.tolist()

    # --- initiating --------------------------------------------------------------------------

    def initiate(self, edge: int, now: float) -> Outgoing | None:
        """Handle a tick of ``edge``'s clock at this end; return the request to send, if any.

        Returns ``None`` if the tick waits for the lock (it starts later, through
        :meth:`take_outgoing` or :meth:`expire`), or if it is skipped (counted): the edge is
        stuck, ``max_in_flight`` are pending on it, the node is recovering or closed.
        """
        if not self.exclusive or (self._engaged is None and not self._waiting):
            return self._start(Activation(edge), now)
        if not self._startable(edge):
            self.counters.skipped += 1
            return None
        self._waiting.add(Activation(edge))  # behind older ones: engaged, or pausing
        self.counters.waited += 1
        if self._engaged is not None:
            return None
        self._start_waiting(now)
        started = self.take_outgoing()
        return started[0] if started else None

    def _startable(self, edge: int) -> bool:
        state = self._edges[edge]
        limit = self.max_in_flight
        return not (
            state.stuck
            or (limit is not None and len(state.pending) >= limit)
            or not (self.open and self.initiating)
            or self._unrecovered
        )

    def _start(self, activation: Activation, now: float) -> Outgoing | None:
        if not self._startable(activation.edge):
            self.counters.skipped += 1
            return None
        state = self._edges[activation.edge]
        t = max(self.timebase.t(now), self._last, activation.not_before)
        seq = state.next_seq
        request = Request(
            src=self.node_id,
            edge=state.link.edge,
            seq=seq,
            ack=state.ack(),  # before this one
            t=t,
            u=tuple(self._exchanged(t)),
        )
        state.next_seq += 1
        frame = encode(request)
        timeout = self.current_timeout()
        pending = Pending(
            activation.edge,
            seq,
            state.link.peer,
            frame,
            t,
            now,
            timeout,
            now + timeout,
            bounces=activation.bounces,
        )
        state.pending[seq] = pending
        self._in_flight += 1
        if self.exclusive:
            self._engaged = pending
        self._deadlines.arm(pending)
        self.counters.initiated += 1
        return Outgoing(state.link.peer, frame)

    def _start_waiting(self, now: float) -> None:
        """Free: start the first activation that may start (more if there is no lock)."""
        while self._engaged is None:
            activation = self._waiting.take_ready(now)
            if activation is None:
                return
            out = self._start(activation, now)
            if out is not None:
                self._outbox.append(out)

    def _disengage(self, pending: Pending, now: float) -> None:
        if self._engaged is pending:
            self._engaged = None
            self._start_waiting(now)

    def next_deadline(self) -> float | None:
        """Return the earliest retry deadline (Unix seconds), or ``None`` if nothing is pending."""
        return self._deadlines.next()

    def next_start(self) -> float | None:
        """Return when (Unix seconds) the node, free, pausing after a refusal, starts again."""
        return None if self._engaged is not None else self._waiting.next_ready()

    def expire(self, now: float) -> list[Outgoing]:
        """Return what to send at ``now``: requests re-sent because their timeout passed, and
        activations started because their pause is over (or the lock was released)."""
        out: list[Outgoing] = []
        while (pending := self._deadlines.pop_due(now)) is not None:
            state = self._edges[pending.edge]
            phase, action = INITIATOR_TRANSITIONS[(pending.phase, Event.TIMEOUT)]
            assert action is Action.RESEND
            pending.retries += 1
            pending.phase = phase
            pending.timeout = min(2.0 * pending.timeout, self.max_timeout)
            pending.deadline = now + pending.timeout
            self._deadlines.arm(pending)
            self.counters.retried += 1
            out.append(Outgoing(pending.peer, pending.frame))  # the same frame: same T and u
            if pending.retries == STUCK_RETRIES:
                state.stuck += 1
                if self._engaged is pending:  # a silent peer must not freeze this node
                    self.counters.released += 1
                    self._disengage(pending, now)
        self._start_waiting(now)
        out.extend(self.take_outgoing())
        return out

    def stop_initiating(self) -> int:
        """Start nothing more (the node is stopping); return the activations dropped."""
        self.initiating = False
        dropped = self._waiting.clear()
        self.counters.skipped += dropped
        return dropped

    def abandon_all(self) -> int:
        """Give up on everything pending (the node is exiting); return how much there was.

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
        self._engaged = None
        self.stop_initiating()
        self.counters.failed += count
        return count

    def close(self) -> None:
        """Stop initiating, and answer new requests with a Nack (cached ones are still answered)."""
        self.open = False
        self.stop_initiating()

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

        Then send what :meth:`take_outgoing` returns (an answer may free the lock). Never
        raises on bad input: frames that fail validation or the rules in the module header
        are counted in ``counters.rejected`` and leave the state unchanged.
        """
        try:
            return self._dispatch(decode(frame), now)
        except GossipError:
            self.counters.rejected += 1
            return None

    def _dispatch(self, message: Message, now: float) -> bytes | None:
        if isinstance(message, Request):
            return self._on_request(message, now)
        if isinstance(message, Reply):
            self._on_answer(message, Event.REPLY, now)
            return None
        if isinstance(message, Busy):
            self._on_answer(message, Event.BUSY, now)
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

    def _edge_from(self, src: int, edge: int) -> EdgeState:
        state = self._edges.get(edge)
        if state is None or state.link.peer != src:
            raise ProtocolError(
                f"edge {edge} from node {src} is not an edge of node {self.node_id}"
            )
        return state

    def _check_time(self, t: float, now: float) -> None:
        # Only the future is dangerous: moving a flow back from far ahead multiplies by
        # exp(+2 eta tau). A time far in the past (an old retry) is merely late, and exact.
        t_now = self.timebase.t(now)
        if t - t_now > self.max_skew_t:
            raise ProtocolError(
                f"field 't' = {t!r} is ahead of our time {t_now!r} by more than the max skew "
                f"{self.max_skew_t!r} (units of t)"
            )

    def _check_dim(self, name: str, value: tuple[float, ...]) -> None:
        if len(value) != self.ledger.dim:
            raise ProtocolError(
                f"field {name!r} has {len(value)} components; this cluster's dim is "
                f"{self.ledger.dim}"
            )

    def _standing(self, t: float) -> Standing:
        if not self.open or self._unrecovered:
            return Standing.CLOSED
        if self.exclusive and (self._engaged is not None or t < self._last):
            return Standing.BUSY
        return Standing.FREE

    def _on_request(self, msg: Request, now: float) -> bytes | None:
        state = self._edge_from(msg.src, msg.edge)
        self._check_dim("u", msg.u)
        self._check_time(msg.t, now)
        action = SERVER_ACTIONS[(self._standing(msg.t), state.lookup(msg.seq, msg.ack))]
        if action == "answer":
            self.counters.duplicates += 1
            return state.cache[msg.seq]
        if action == "ignore":
            self.counters.duplicates += 1
            return None
        if action == "nack":
            why = "recovering" if self._unrecovered else "closed"
            answer = encode(Nack(src=self.node_id, edge=msg.edge, seq=msg.seq, reason=why))
        elif action == "busy":
            # The earliest T we could accept: after our own exchange's, and our last jump.
            after = max(self._last, -math.inf if self._engaged is None else self._engaged.t)
            answer = encode(Busy(src=self.node_id, edge=msg.edge, seq=msg.seq, t=after))
            self.counters.refused += 1
        else:
            if self.timebase.t(now) - msg.t > self.max_skew_t:
                # Our state that far back would be mixed back by exp(+2 eta tau): overflow.
                # Only a clock off by more than the skew sends a new request so old.
                raise ProtocolError(
                    f"field 't' = {msg.t!r} is behind our time {self.timebase.t(now)!r} by "
                    f"more than the max skew {self.max_skew_t!r} (units of t)"
                )
            u_w = self._exchanged(msg.t)
            dx, dz = edge_flow_values(msg.u, u_w, self.c, state.link.step)  # into the initiator
            self.ledger.add_values(msg.edge, dx, dz, msg.t, sign=-1.0)  # raises before change
            self._last = max(self._last, msg.t)
            answer = encode(
                Reply(
                    src=self.node_id,
                    edge=msg.edge,
                    seq=msg.seq,
                    t=msg.t,
                    dx=tuple(dx),
                    dz=tuple(dz),
                )
            )
            state.activations += 1
            self.counters.served += 1
        state.max_seen = max(state.max_seen, msg.seq)
        state.cache[msg.seq] = answer
        return answer

    def _on_answer(self, msg: Reply | Busy | Nack, event: Event, now: float) -> None:
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
            self._apply_reply(state, pending, msg, now)  # raises before any change
        elif action is Action.BACK_OFF:
            assert isinstance(msg, Busy)
            self.counters.bounced += 1
            if self.initiating and self.open:
                bounces = pending.bounces + 1
                rtt = self._timer.srtt() or self._backoff
                ready = now + backoff_delay(bounces, rtt, self._rng)
                self._waiting.add_first(Activation(msg.edge, ready, msg.t, bounces))
            else:
                self.counters.skipped += 1
        else:
            self.counters.failed += 1
        del state.pending[msg.seq]
        self._in_flight -= 1
        if pending.retries >= STUCK_RETRIES:
            state.stuck -= 1
        self._disengage(pending, now)

    def _apply_reply(self, state: EdgeState, pending: Pending, msg: Reply, now: float) -> None:
        self._check_dim("dx", msg.dx)
        if msg.t != pending.t:
            raise ProtocolError(
                f"reply to exchange {msg.seq} on edge {msg.edge} has t={msg.t!r}; the request's "
                f"was {pending.t!r}"
            )
        self.ledger.add_values(msg.edge, msg.dx, msg.dz, pending.t)  # raises before any change
        self._last = max(self._last, pending.t)
        state.activations += 1
        self._timer.sample(now - pending.first_sent, retried=pending.phase is not Phase.SENT)

    # --- recovery ----------------------------------------------------------------------------

    def _on_ledger_request(self, msg: LedgerRequest, now: float) -> bytes:
        state = self._edge_from(msg.src, msg.edge)
        t = max(self.timebase.t(now), self._last)  # after every jump of ours
        return encode(ledger_reply(self.node_id, self.ledger, state, t))

    def _on_ledger_reply(self, msg: LedgerReply, now: float) -> None:
        state = self._edge_from(msg.src, msg.edge)
        if state.recovered:
            self.counters.duplicates += 1
            return
        self._check_dim("fx", msg.fx)
        self._check_time(msg.t, now)
        apply_ledger_reply(self.ledger, state, msg)
        self._unrecovered -= 1
        self._last = max(self._last, msg.t)
