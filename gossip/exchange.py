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

Exact mode (``exact=True``, the node's ``--exact``): the jumps are made exact after the fact
by linear corrections (:mod:`gossip.corrections` states the theory). On top of the rules above:

* every jump at this node (served, or initiated and answered) joins a window of recent jumps
  with the own input it used: the server's ``x_w(T)``, or for the initiator the values it sent
  mixed to T, which it knows exactly because a retry re-sends the *same* frame in this mode;
* after every change (a new jump, a flow for an earlier one) the window is processed in time
  order from the change on; each jump whose own input was off by ``d`` gets ``-G(d)`` here and
  a :class:`~gossip.wire.Correction` carries ``+G(d)`` to the peer, one message per edge per
  pass (all the items of that edge);
* a correction is numbered in the same sequence as the node's requests on that edge, and
  handled like one: the peer applies it first, caches its :class:`~gossip.wire.CorrectionAck`
  and answers repeats from the cache; the sender applies its side when the ack arrives, so a
  lost message or a dead node never breaks the sums. A Nack (the peer closed or recovering)
  means neither side applies it, and that jump is no longer corrected;
* the peer adds the flow to its own record of the jump and processes its later jumps, which
  may send corrections on its other edges: corrections only move forward in time, so they die
  out (tests/gossip/test_exchange_exact.py checks the result against a sequential replay);
* jumps older than ``horizon`` seconds are final; a flow older than that is applied (mass
  exact) and counted in ``counters.late``, and only the jumps still in the window are fixed;
* recovery stays exact: a restarted node rebuilds its ledger as below, its window starts empty,
  and since corrections share the request numbering, the neighbour's ``LedgerReply.seq`` also
  renumbers them; a correction the peer applied but never acknowledged is in its ledger, so
  in the rebuilt one too; one not applied is Nacked while recovering, so in neither.

Recovery (a restarted node, which gets the same bootstrap back): before gossiping it asks each
neighbour for its ledger on the shared edge (``LedgerRequest``), sets its own to the negative
(``LedgerReply``), and numbers its next exchanges above the highest the neighbour has seen.
Until every edge is recovered it neither initiates nor applies (it Nacks).

The transitions are data (:data:`INITIATOR_TRANSITIONS`, :data:`SERVER_ACTIONS`, in
:mod:`gossip.protocol`); the methods of :class:`Exchanger` look them up and carry them out.
Holding is :mod:`gossip.holding`, the retry timer :mod:`gossip.rto`, the corrections'
bookkeeping :mod:`gossip.corrections`. Time comes in as ``now``, Unix seconds
on the caller's clock; the protocol's time is ``t = rate * (now - epoch)``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from gossip.correcting import Correcting
from gossip.corrections import CorrectionQueue, JumpWindow, jump_id
from gossip.errors import ConfigError, GossipError, ProtocolError
from gossip.holding import DEFERRED, Holding
from gossip.jumps import Flow, edge_flow_values
from gossip.ledger import Ledger
from gossip.mixing import mix_values
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
    ServerCase,
    TimeBase,
)
from gossip.rto import RetryTimer
from gossip.wire import (
    Correction,
    CorrectionAck,
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


class Exchanger(Correcting):
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
    exact : bool
        Correct every jump's inputs after the fact (see "Exact mode" in the module header).
        The caller sends what :meth:`take_outgoing` returns after each call that may produce
        corrections (:meth:`receive`, :meth:`release`).
    horizon : float or None
        Exact mode: seconds after which a jump is final (default ``4 * max_timeout``).
    rel_tol : float
        Exact mode: corrections below this times the size of the values are not sent.
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
        exact: bool = False,
        horizon: float | None = None,
        rel_tol: float = 1e-12,
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
        if horizon is not None and not (math.isfinite(horizon) and horizon > 0):
            raise ConfigError(f"horizon must be > 0 seconds, got {horizon!r}")
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
        if max_in_flight is not None and max_in_flight < 1:
            raise ConfigError(f"max_in_flight must be >= 1 or None, got {max_in_flight!r}")
        self.max_in_flight = max_in_flight
        self.counters = Counters()
        self.open = True
        self._edges = {link.edge: EdgeState(link, recovered=not recover) for link in links}
        self._unrecovered = len(self._edges) if recover else 0
        self._deadlines: list[tuple[float, int, int]] = []  # (deadline, edge, seq), lazy
        self.hold = hold
        self._holding = Holding(node_id)
        self._in_flight = 0  # exchanges started here and pending, all edges
        self._corrections_in_flight = 0
        self._outbox: list[Outgoing] = []
        self._queue = CorrectionQueue()
        self.window: JumpWindow | None = None
        if exact:
            x0 = ledger.initial.tolist()
            self.window = JumpWindow(
                x0,
                x0,
                0.0,
                eta=self.eta,
                c=self.c,
                horizon_t=(4.0 * self.max_timeout if horizon is None else horizon) * timebase.rate,
                rel_tol=rel_tol,
                node_id=node_id,
            )

    # --- introspection -----------------------------------------------------------------------

    @property
    def links(self) -> tuple[Link, ...]:
        """The node's edges."""
        return tuple(state.link for state in self._edges.values())

    @property
    def exact(self) -> bool:
        """True if jumps are corrected (exact mode)."""
        return self.window is not None

    @property
    def recovering(self) -> bool:
        """True until every edge's ledger has been recovered from its neighbour."""
        return self._unrecovered > 0

    @property
    def pending(self) -> int:
        """Number of exchanges this node started that are not settled yet."""
        return self._in_flight

    @property
    def pending_corrections(self) -> int:
        """Number of corrections this node sent that are not acknowledged yet."""
        return self._corrections_in_flight

    @property
    def busy(self) -> bool:
        """True in ``hold`` mode while an exchange this node started is in flight."""
        return self.hold and self._in_flight > 0

    @property
    def deferred(self) -> int:
        """Number of requests held back, waiting for :meth:`release`."""
        return len(self._holding.queue)

    @property
    def deferrals(self) -> int:
        """Requests held back so far (``hold`` mode)."""
        return self._holding.deferrals

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
        """Return (and forget) the corrections to send to peers' servers (exact mode)."""
        out, self._outbox = self._outbox, []
        return out

    def _values(self, t: float) -> tuple[list[float], list[float]]:
        # In exact mode, our best view: it counts our own corrections still in flight.
        if self.window is not None:
            current = self.window.current(t)
            if current is not None:
                return current
        return self.ledger.state_values(t)

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
        state.pending[seq] = Pending(
            edge,
            seq,
            state.link.peer,
            frame,
            now,
            timeout,
            deadline,
            t_sent=request.t,
            x_sent=list(request.x),
            z_sent=list(request.z),
        )
        self._in_flight += 1
        heapq.heappush(self._deadlines, (deadline, edge, seq))
        self.counters.initiated += 1
        return Outgoing(state.link.peer, frame)

    def _request(self, state: EdgeState, seq: int, ack: int, now: float) -> Request:
        t = self.timebase.t(now)
        x, z = self._values(t)
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
        """Return the requests (and corrections) to re-send because their timeout passed."""
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
            if not pending.is_correction and self.window is None:
                # Fresher values: fewer stale jumps. In exact mode the same frame goes again,
                # so that the input the server used is known here exactly.
                request = self._request(state, seq, state.ack(), now)
                pending.frame = encode(request)
            out.append(Outgoing(pending.peer, pending.frame))
        return out

    def abandon_all(self) -> int:
        """Give up on everything pending (the node is exiting); return how much there was.

        Each is counted as failed. The peer may have applied some of them: that is the one
        case where the sums can break, and why stopping waits for pending exchanges (and
        corrections) first.
        """
        count = 0
        for state in self._edges.values():
            count += len(state.pending)
            state.pending.clear()
            state.stuck = 0
        self._deadlines.clear()
        self._in_flight = 0
        self._corrections_in_flight = 0
        self._queue.clear()  # never sent: applied nowhere
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

    def receive(self, frame: bytes, now: float, sender: int | None = None) -> bytes | None:
        """Handle one frame from a peer; return the answer to send back to it, if any.

        Never raises on bad input: frames that fail validation or the rules in the module
        header are counted in ``counters.rejected`` and leave the state unchanged.
        ``sender`` is the node id authenticated on the frame's connection (CURVE), if known:
        a message whose ``src`` is another node is counted in ``counters.forged`` and ignored.
        """
        try:
            message = decode(frame)
            if sender is not None and getattr(message, "src", sender) != sender:
                self.counters.forged += 1  # src is what the sender wrote; the key is not
                return None
            if self.hold and self.open and self._holding.defers(message, self._in_flight):
                return DEFERRED  # ids order the waits: no cycle, no deadlock
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
        answers: list[bytes | None] = []
        for message in self._holding.take(self._in_flight, force):
            try:
                answers.append(self._on_request(message, now))
            except GossipError:
                self.counters.rejected += 1
                answers.append(None)
        return answers

    def _dispatch(self, message: Message, now: float) -> bytes | None:
        if isinstance(message, Request):
            return self._on_request(message, now)
        if isinstance(message, Reply | CorrectionAck):
            self._on_answer(message, Event.REPLY, now)
            return None
        if isinstance(message, Nack):
            self._on_answer(message, Event.NACK, now)
            return None
        if isinstance(message, Correction):
            return self._on_correction(message, now)
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

    def _server_case(self, state: EdgeState, seq: int, ack: int) -> str:
        """Look a request or correction up against the edge's cache: the server's action."""
        if ack > state.ack_seen:
            state.ack_seen = ack
            # Answers numbered <= ack can never be asked for again.
            for old in [s for s in state.cache if s <= ack]:
                del state.cache[old]
        if seq in state.cache:
            case = ServerCase.CACHED
        elif seq <= state.ack_seen:
            case = ServerCase.STALE
        else:
            case = ServerCase.NEW
        action = SERVER_ACTIONS[(self.open and not self._unrecovered, case)]
        if action in ("answer", "ignore"):
            self.counters.duplicates += 1
        return action

    def _admit(self, state: EdgeState, seq: int, ack: int) -> tuple[bool, bytes | None]:
        """Admit a numbered request or correction: ``(True, None)`` if it is new and is to be
        applied now, else ``(False, what to answer)`` (the cached answer, a Nack, or nothing)."""
        action = self._server_case(state, seq, ack)
        if action == "answer":
            return False, state.cache[seq]
        if action == "ignore":
            return False, None
        if action == "nack":
            return False, self._nack(state, seq)
        state.max_seen = max(state.max_seen, seq)
        return True, None

    def _nack(self, state: EdgeState, seq: int) -> bytes:
        why = "recovering" if self._unrecovered else "closed"
        state.max_seen = max(state.max_seen, seq)
        answer = encode(Nack(src=self.node_id, edge=state.link.edge, seq=seq, reason=why))
        state.cache[seq] = answer
        return answer

    def _on_request(self, msg: Request, now: float) -> bytes | None:
        state = self._edge_from(msg.src, msg.edge)
        self._check_dim("x", msg.x)
        t_now = self._check_time(msg.t, now)
        new, answer = self._admit(state, msg.seq, msg.ack)
        if not new:
            return answer
        x_w, _ = self._values(t_now)
        x_v, _ = mix_values(msg.x, msg.z, self.eta, t_now - msg.t)
        dx, dz = edge_flow_values(x_v, x_w, self.c)  # into the initiator v
        self.ledger.add_values(msg.edge, dx, dz, t_now, sign=-1.0)  # raises before change
        answer = encode(
            Reply(src=self.node_id, edge=msg.edge, seq=msg.seq, t=t_now, dx=tuple(dx), dz=tuple(dz))
        )
        state.activations += 1
        self.counters.served += 1
        state.cache[msg.seq] = answer
        if self.window is not None:
            self.window.finalize(t_now)
            start = self.window.add_jump(
                t_now,
                edge=msg.edge,
                peer=msg.src,
                jid=jump_id(msg.seq, mine=False),
                used=x_w,
                dx=[-v for v in dx],
                dz=[-v for v in dz],
            )
            self._correct(start, t_now)
        return answer

    def _on_answer(self, msg: Reply | CorrectionAck | Nack, event: Event, now: float) -> None:
        state = self._edge_from(msg.src, msg.edge)
        pending = state.pending.get(msg.seq)
        if pending is None:
            if msg.seq >= state.next_seq:
                raise ProtocolError(f"answer to exchange {msg.seq} on edge {msg.edge}: never sent")
            self.counters.duplicates += 1
            return
        if (isinstance(msg, Reply) and pending.is_correction) or (
            isinstance(msg, CorrectionAck) and not pending.is_correction
        ):
            raise ProtocolError(
                f"a {msg.TYPE} cannot answer {msg.seq} on edge {msg.edge}: it was a "
                f"{'correction' if pending.is_correction else 'request'}"
            )
        _, action = INITIATOR_TRANSITIONS[(pending.phase, event)]
        if pending.items is not None:
            self._settle_correction(state, pending, action is Action.APPLY, now)
        elif action is Action.APPLY:
            assert isinstance(msg, Reply)
            self._apply_reply(state, pending, msg, now)
        else:
            self.counters.failed += 1
        del state.pending[msg.seq]
        if pending.items is None:
            self._in_flight -= 1
        else:
            self._corrections_in_flight -= 1
        if pending.retries >= STUCK_RETRIES:
            state.stuck -= 1

    def _apply_reply(self, state: EdgeState, pending: Pending, msg: Reply, now: float) -> None:
        self._check_dim("dx", msg.dx)
        t_now = self._check_time(msg.t, now)
        self.ledger.add_values(msg.edge, msg.dx, msg.dz, msg.t)  # raises before any change
        state.activations += 1
        self._timer.sample(now - pending.first_sent, retried=pending.phase is not Phase.SENT)
        if self.window is not None:
            # Exactly the server's arithmetic on the same floats: the input it used.
            used, _ = mix_values(pending.x_sent, pending.z_sent, self.eta, msg.t - pending.t_sent)
            self.window.finalize(t_now)
            start = self.window.add_jump(
                msg.t,
                edge=msg.edge,
                peer=msg.src,
                jid=jump_id(msg.seq, mine=True),
                used=used,
                dx=msg.dx,
                dz=msg.dz,
            )
            self._correct(start, t_now)

    # --- recovery ----------------------------------------------------------------------------

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
        t_now = self._check_time(msg.t, now)
        total = Flow(-np.asarray(msg.fx), -np.asarray(msg.fz))
        self.ledger.set_edge_total(msg.edge, total, msg.t)
        state.next_seq = max(state.next_seq, msg.seq + 1)
        state.recovered = True
        self._unrecovered -= 1
        if self.window is not None:  # no jump of ours yet: the recovered state is the base
            x, z = self.ledger.state_values(t_now)
            self.window.reset(x, z, t_now)
