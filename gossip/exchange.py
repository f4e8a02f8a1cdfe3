"""The exchange protocol between neighbours, as a sans-IO state machine: exact jumps by design.

Theory of operation
-------------------
Edge e = {v, w} fires at rate ``P_e`` per unit of t. Its clock is split between its ends: each
end fires it at ``P_e / 2`` and *initiates* the exchange; the other end *serves* it. A jump
must use both ends' values at one time T (SPEC section 4; in general the exchanged values
``u = g(x)`` of SPEC section 6), as the sequential model does. The rule that gives this:

**The rule.** Each node holds a lock: it is *engaged* from the moment it starts an exchange
until that exchange is settled, and it keeps ``L``, the latest time of a jump it applied.

1. A tick of edge e, due at ``t_k``, at v: if v is engaged, the tick waits (in arrival order,
   :mod:`gossip.waiting`) and fires when v is free: late, never dropped. Once free, v engages
   and takes the jump time ``T = max(t_k, L_v, floor)``: the tick's own time, unless v already
   jumped later (``floor`` is a refused request's, step 3; T never goes back more than half
   the max skew). A tick that waited thus still jumps when the model says, if nothing came
   between: late application is exact (SPEC section 5), so only its reply is late. v computes
   ``(x_v, z_v)(T)`` from its ledger and sends ``Request(edge, seq, T, u_v, z_v)``: with
   ``z_v``, w may *move* the jump later (gossip's ``u = x``); an exchanged ``u = g(x)``
   (SPEC section 6), which w cannot compute, is sent without it and cannot move.
2. The server w refuses, with a :class:`~gossip.wire.Busy`, if ``L_w > T`` and the jump cannot
   move. If w is engaged, the request *waits* (:data:`DEFERRED`, :mod:`gossip.deferral`) until
   w's own exchange settles, then is decided as a new one, unless it cannot move and is older
   than w's exchange (w's L will pass it: refused). If w's exchange is with v itself (each
   asked the other), :mod:`gossip.crossing` decides: the higher id serves at once, the lower
   catches the other's values up past that jump (or, if they cannot move, the higher id
   withdraws its own request and starts it again at once): neither is refused.
   A request still waiting after ``wait_limit`` (by default the first timeout, a few round
   trips) is refused. Otherwise w serves it at ``T_s = max(T, L_w)``: it mixes v's pair from T
   to T_s in closed form if T_s > T (v is engaged: it applies nothing meanwhile, so that is v's
   pair at T_s; counted in ``counters.postponed``), computes ``u_w(T_s)`` from its ledger,
   applies ``-flow`` at T_s (:func:`gossip.jumps.edge_flow`, with the edge's step), sets
   ``L_w = T_s`` and replies ``Reply(edge, seq, T_s, flow)``. Either answer is cached under
   ``(edge, seq)``, so a delayed duplicate of the request gets the same answer and can never be
   applied later.
3. v applies ``+flow`` at T_s when the reply comes (late application is exact), sets
   ``L_v = T_s`` and is free. On a Busy it is free too, and tries the activation again after
   a random pause of the order of a round trip, as a new request (new seq, fresh values, T at
   least the Busy's floor: w's L and its own exchange's T); meanwhile it serves others, but
   starts nothing (a node that started its next waiting tick at once would stay engaged, and
   neighbours refusing each other would livelock). One refusal is tried again at once: the
   first of a request that cannot move, whose floor is past its T (w had jumped past it; the
   new request, at the floor, is likely served).

**Why it is exact (sketch).** Claim: every node applies its jumps in non-decreasing order of
their times. A node applies a jump either as a server, at ``T_s >= L``, or as an initiator at
the T_s its server chose, ``>= T >= L``; and while its own exchange is in flight it applies
nothing else (it refuses or defers every request, starts nothing; but a crossing request of its
server's, which that server then accounts for, or for which the node withdraws its own
request: :mod:`gossip.crossing`), so its pair at T_s is
its pair at T mixed forward, which is what the server used. So each node's ledger, read at a
jump's time, holds exactly the node's jumps before it: the two values are those the sequential
process has just before that jump, whatever the latencies. The jumps, sorted by T (ties in the
order the nodes applied them, which both ends agree on), are then a sequential run of the
model, and the network's states equal its replay: live and simulated curves differ only by
*when* the jumps are (ticks fired late, refused ones tried again later), never by what a jump
does. Mass stays exact: opposite flows at the same T.

**No deadlock, no starvation.** An engaged node waits for one server, so the waits form chains.
A chain that closes into a cycle of two (v and w each asked the other) is broken at once by the
id rule (:mod:`gossip.crossing`): the higher id serves without waiting. A longer cycle follows
a cycle of the graph, every node on it engaged toward the next at once (there is none on a
tree, such as a line); ``wait_limit`` breaks it: its requests are refused
(``counters.overdue``), and each end tries again. Every wait is thus bounded: by the server's
own exchange, or by the limit. Refused activations try again after independent random pauses
(doubling with each refusal, :func:`~gossip.waiting.backoff_delay`), so of nodes that keep
refusing each other one goes first with probability bounded away from 0. A wait costs its
initiator the rest of the server's exchange, a refusal a pause and a second request: the rule
refuses only where it must. Both are counted (``refused``, ``bounced``, ``waited``,
``deferred``).

Rules for the bad days:

* Lost messages: a request not answered within the timeout is re-sent as the *same frame*
  (same seq, T and ``u_v``: v's state has not changed meanwhile, it is engaged). The server
  applies it once (its cache), or refuses it once. The timeout doubles at each retry up to a
  maximum; the first one adapts to the measured round trips (:mod:`gossip.rto`). A request
  numbered ``<= ack`` (v's watermark) and no longer cached is ignored, one beyond ``ack +
  SEQ_WINDOW`` rejected: that bounds the cache (:data:`~gossip.protocol.SEQ_WINDOW`).
* A peer silent for :data:`~gossip.protocol.STUCK_RETRIES` retries must not freeze its
  neighbour: the lock is *released* (``counters.released``), the node serves and initiates
  again, the exchange stays pending (and retried) so that if the peer applied it, its reply
  is still applied and the sums stay exact; that edge's ticks are skipped until it settles.
  The peer is handed out of :meth:`~gossip.initiating.Initiator.take_silent`, for the shell
  to check its connection (:mod:`node.curve`). Exactness then holds only for exchanges
  answered in time: a reply to a released exchange is applied at its own T, possibly before
  jumps made since.
* Clock skew: T may be a little ahead of the server's clock (the ledger mixes forward in
  closed form); a T more than ``max_skew`` seconds ahead is rejected, so is a new request
  more than ``max_skew`` behind (mixed back by an ``exp(+2 eta tau)`` that overflows), and so
  is a Busy's ``t`` or a moved Reply's T_s more than ``max_skew`` ahead.
* A closed server (its node is stopping) or one still recovering answers new requests with a
  :class:`~gossip.wire.Nack` ("not applied, and never will be"); the initiator drops them.
* Nothing from a peer changes the state unless it passes :func:`gossip.wire.decode` and comes
  from the neighbour at the other end of the named edge, with a value of the right dimension
  and a finite result. Everything else is counted as rejected and dropped without an answer.
* ``exclusive=False`` turns the lock off (no waiting, no refusal): the server then reads its
  state at T even if it jumped after T. That is not exact; it exists to show the difference.

Recovery: a restarted node takes its ledger back from its neighbours before it gossips, and
Nacks until every edge is recovered (:mod:`gossip.recovery`, also how a node announces a new
address). Stopping: a closed node exits only once its neighbours can no longer need its
answers (:mod:`gossip.parting`).

The transitions are data (:data:`INITIATOR_TRANSITIONS`, :data:`SERVER_ACTIONS`, in
:mod:`gossip.protocol`); :class:`Exchanger` looks them up and carries them out: this module
serves and receives, its bases :class:`gossip.initiating.Initiator` and
:class:`gossip.answers.Answering` initiate (steps 1 and 3).
The owed activations are :mod:`gossip.waiting`, the retry timer :mod:`gossip.rto`, recovery
:mod:`gossip.recovery`. Time comes in as ``now``, Unix seconds on the caller's clock; the
protocol's time is ``t = rate * (now - epoch)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from gossip.crossing import (
    catchable,
    caught_up,
    crosses_pending,
    lacks_jump,
    standing_toward_peer,
)
from gossip.deferral import Deferred
from gossip.errors import ConfigError, GossipError, ProtocolError
from gossip.initiating import ExchangeValue
from gossip.jumps import edge_flow_values
from gossip.ledger import Ledger
from gossip.mixing import mix_values
from gossip.protocol import (
    SEQ_WINDOW,
    SERVER_ACTIONS,
    EdgeState,
    Event,
    Link,
    Outgoing,
    Standing,
    TimeBase,
)
from gossip.trace import Trace
from gossip.views import Viewing
from gossip.wire import (
    Busy,
    Done,
    LedgerReply,
    LedgerRequest,
    Message,
    Moved,
    Nack,
    Reply,
    Request,
    decode,
    encode,
)

__all__ = ["DEFERRED", "Exchanger"]

FloatArray = NDArray[np.float64]

DEFERRED = b""
"""What :meth:`Exchanger.receive` returns for a request that waits for this node to be free:
its answer comes later from :meth:`Exchanger.take_released`, with the route given."""


class Exchanger(Viewing):
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
    timeout, max_timeout, min_timeout : float
        First retry timeout until round trips are measured, largest one (it doubles at each
        retry), and smallest first one once adapted to the round trips; in seconds.
    max_skew : float
        Largest accepted gap, in seconds, between a peer's time in a message and ours.
    recover : bool
        Start by recovering the ledger from the neighbours (a restarted node).
    max_in_flight : int or None
        Most exchanges started by this node and pending on one edge; ``None``: no limit
        (with the lock, only a released one can be pending beside a new one).
    exchange_value : callable or None
        ``u = g(x)``, see :data:`ExchangeValue`; ``None``: ``u = x``.
    exclusive : bool
        The lock of the module header. ``False`` is for showing what it prevents.
    rng : numpy Generator, int or None
        Randomness of the back-off pauses (a seed; ``None``: seeded by ``node_id``).
    backoff : float
        Pause scale, in seconds, before a round trip is measured (then the smoothed one).
    trace : Trace or None
        Exact samples of this node's values on a grid of times (:mod:`gossip.trace`), read
        just before each jump; ``None``: none.
    wait_limit : float or None
        Longest a request waits for this node's exchange, in seconds, before it is refused
        (it breaks a cycle of waits: module header). ``None``: the current first timeout
        (:meth:`~gossip.initiating.Initiator.current_timeout`), a few round trips.
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
        trace: Trace | None = None,
        wait_limit: float | None = None,
    ):
        super().__init__(
            node_id,
            links,
            ledger,
            timebase,
            timeout=timeout,
            max_timeout=max_timeout,
            min_timeout=min_timeout,
            max_skew=max_skew,
            recover=recover,
            max_in_flight=max_in_flight,
            exchange_value=exchange_value,
            exclusive=exclusive,
            rng=rng,
            backoff=backoff,
            trace=trace,
        )
        self.c = float(c)
        if wait_limit is not None and not wait_limit > 0:
            raise ConfigError(f"wait_limit must be > 0 seconds or None, got {wait_limit!r}")
        self.wait_limit = wait_limit
        self._deferred = Deferred()  # requests waiting for our exchange to settle
        self._released: list[tuple[bytes | None, bytes]] = []
        self._start_recovery(recover)
        self._start_parting()

    def take_released(self) -> list[tuple[bytes | None, bytes]]:
        """Return (and forget) the answers to deferred requests, with the routes given to
        :meth:`receive`: send them after each call, like :meth:`take_outgoing`."""
        out, self._released = self._released, []
        return out

    def close(self) -> None:
        """Stop initiating, and answer new requests with a Nack (cached ones are still
        answered; so are deferred ones, through :meth:`take_released`)."""
        super().close()
        self._serve_deferred(math.nan)  # closed: each gets a Nack

    # --- receiving ------------------------------------------------------------------------------
    def receive(
        self, frame: bytes, now: float, route: bytes | None = None, sender: int | None = None
    ) -> bytes | None:
        """Handle one frame from a peer; return the answer to send back to it, if any.

        A request that waits returns :data:`DEFERRED`; its answer comes out of
        :meth:`take_released` with ``route``. Then send what :meth:`take_outgoing` and
        :meth:`take_released` return (an answer may free the lock). Never raises on bad
        input: it is counted in ``counters.rejected`` and leaves the state unchanged.
        ``sender`` is the node id authenticated on the frame's connection (CURVE), if known:
        a message whose ``src`` is another node is counted in ``counters.forged`` and ignored.
        """
        try:
            message = decode(frame)
            if sender is not None and getattr(message, "src", sender) != sender:
                self.counters.forged += 1  # src is what the sender wrote; the key is not
                return None
            return self._dispatch(message, now, route)
        except GossipError:
            self.counters.rejected += 1
            return None

    def _dispatch(self, message: Message, now: float, route: bytes | None) -> bytes | None:
        if isinstance(message, Request):
            return self._on_request(message, now, route)
        if isinstance(message, Reply):
            self._on_answer(message, Event.REPLY, now)
            return None
        if isinstance(message, Busy):
            # Its t becomes the floor of our next request's T: one far ahead would make every
            # later request of ours absurd (refused by the peer, the edge stuck for good).
            self._check_time(message.t, now)
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
        if isinstance(message, Moved):
            self._on_moved(message, route)
            return None
        if isinstance(message, Done):
            return self._on_done(message, route)
        raise ProtocolError(f"a {message.TYPE} message is not part of the exchange protocol")

    def _standing(self, msg: Request, state: EdgeState) -> Standing:
        if not self.open or self._unrecovered:
            return Standing.CLOSED
        if msg.t >= self.horizon:  # of a membership view we have not switched to yet
            return Standing.BUSY
        if not self.exclusive:
            return Standing.FREE
        if msg.t < self._last and not self._movable(msg):
            return Standing.BUSY
        if lacks_jump(msg, state) and not catchable(
            msg, state, self._movable(msg), self._view_start
        ):
            return Standing.BUSY  # it lacks jumps we cannot put back in: waiting cannot help
        engaged = self._engaged
        if engaged is not None and engaged.peer == msg.src:  # each asked the other
            standing = standing_toward_peer(msg, engaged, self.node_id)
        elif crosses_pending(msg, state, self.node_id, self._movable(msg)):
            return Standing.BUSY  # our lock was released: its sender may have withdrawn it
        elif engaged is None:
            standing = Standing.FREE
        elif msg.t < engaged.t and not self._movable(msg):
            return Standing.BUSY  # after our exchange L >= its T: waiting would end in a Busy
        else:
            return Standing.WAIT
        serve_now = standing is Standing.FREE or standing is Standing.CROSSING
        return Standing.BUSY if serve_now and self._served_at(msg) >= self.horizon else standing

    def _movable(self, msg: Request) -> bool:
        # Within one membership view only: the old view's mixing and edges differ.
        return msg.z is not None and msg.t >= self._view_start

    def _served_at(self, msg: Request) -> float:
        """The time T_s at which a free server applies ``msg``: its own T, or our L if later and
        the request lets us move it (the initiator is engaged: it jumps nowhere until then)."""
        if self.exclusive and msg.t < self._last and self._movable(msg):
            return self._last
        return msg.t

    def _serve_deferred(self, now: float) -> None:
        for waiter in self._deferred.take_all():
            try:
                answer = self._on_request(waiter.request, now, waiter.route)
            except GossipError:
                self.counters.rejected += 1
                continue
            if answer is not None and answer != DEFERRED:
                self._released.append((waiter.route, answer))

    def _refusal(self, msg: Request) -> bytes:
        """Count and return a Busy for ``msg``, with the earliest T we could accept: after our
        own exchange's, and our last jump (at least its own T: finite, although we may have
        no jump yet)."""
        after = max(self._last, msg.t, -math.inf if self._engaged is None else self._engaged.t)
        self.counters.refused += 1
        return encode(Busy(src=self.node_id, edge=msg.edge, seq=msg.seq, t=after))

    def next_deadline(self) -> float | None:
        """Return the earliest retry deadline, or limit of a waiting request (Unix seconds)."""
        times = [t for t in (super().next_deadline(), self._deferred.next_limit()) if t is not None]
        return min(times, default=None)

    def expire(self, now: float) -> list[Outgoing]:
        """Return what to send at ``now`` (:meth:`Initiator.expire`), and refuse the requests
        that waited their limit: their Busy answers come out of :meth:`take_released`."""
        out = super().expire(now)
        for waiter in self._deferred.overdue(now):
            msg = waiter.request
            answer = self._refusal(msg)
            state = self._edges.get(msg.edge)
            if state is not None:  # a repeat gets the same refusal
                state.max_seen = max(state.max_seen, msg.seq)
                state.cache[msg.seq] = answer
            self.counters.overdue += 1
            self._released.append((waiter.route, answer))
        return out

    def _on_request(self, msg: Request, now: float, route: bytes | None) -> bytes | None:
        state = self._edge_from(msg.src, msg.edge)
        if self._unheard:
            self._unheard.discard(msg.edge)  # they reach us where we are: no more Moved
        self._check_dim("u", msg.u)
        if msg.z is not None:
            self._check_dim("z", msg.z)
        if not msg.ack < msg.seq <= msg.ack + SEQ_WINDOW:
            # An honest initiator numbers at most SEQ_WINDOW ahead of its watermark: our bound.
            raise ProtocolError(
                f"request {msg.seq} on edge {msg.edge} has ack {msg.ack}; valid: ack < seq <= "
                f"ack + {SEQ_WINDOW}"
            )
        if not math.isnan(now):  # nan: answering what waited, while closing
            self._check_time(msg.t, now)
        acked = state.ack_seen
        standing = self._standing(msg, state)
        action = SERVER_ACTIONS[(standing, state.lookup(msg.seq, msg.ack))]
        if state.ack_seen > acked and self._deferred:
            # The initiator has settled every exchange numbered <= ack on this edge: those
            # still waiting here need no answer (and would otherwise pile up).
            self.counters.duplicates += self._deferred.forget(msg.edge, state.ack_seen)
        if action == "answer":
            self.counters.duplicates += 1
            return state.cache[msg.seq]
        if action == "ignore" or (msg.edge, msg.seq) in self._deferred:
            self.counters.duplicates += 1  # a repeat of one waiting: answered when it is
            return None
        if action == "defer":
            # At most about a round trip (our exchange's), unless the waits closed a cycle:
            # the limit breaks it (module header, "No deadlock").
            limit = now + (self.current_timeout() if self.wait_limit is None else self.wait_limit)
            self._deferred.add(msg, route, limit)
            self.counters.deferred += 1
            return DEFERRED
        if action == "nack":
            why = "recovering" if self._unrecovered else "closed"
            answer = encode(Nack(src=self.node_id, edge=msg.edge, seq=msg.seq, reason=why))
        elif action == "busy":
            answer = self._refusal(msg)
        else:
            if self.timebase.t(now) - msg.t > self.max_skew_t:
                # Our state that far back would be mixed back by exp(+2 eta tau): overflow.
                # Only a clock off by more than the skew sends a new request so old.
                raise ProtocolError(
                    f"field 't' = {msg.t!r} is behind our time {self.timebase.t(now)!r} by "
                    f"more than the max skew {self.max_skew_t!r} (units of t)"
                )
            t = self._served_at(msg)
            u_v: Sequence[float] = msg.u
            if self.exclusive and lacks_jump(msg, state):  # it served ours after reading u
                u_v = caught_up(msg, state, self.eta, t)
                self.counters.caught_up += 1
            elif t != msg.t:  # moved: the initiator's (x, z) mixed from its T to ours
                assert msg.z is not None
                u_v = mix_values(msg.u, msg.z, self.eta, t - msg.t)[0]
            self.counters.postponed += t != msg.t
            self.counters.crossed += standing is Standing.CROSSING
            u_w = self._exchanged(t)
            dx, dz = edge_flow_values(u_v, u_w, self.c, state.link.step)  # into the initiator
            self._book_jump(msg.edge, dx, dz, t, sign=-1.0)
            self._last = max(self._last, t)
            answer = encode(
                Reply(src=self.node_id, edge=msg.edge, seq=msg.seq, t=t, dx=tuple(dx), dz=tuple(dz))
            )
            state.activations += 1
            self.counters.served += 1
        state.max_seen = max(state.max_seen, msg.seq)
        state.cache[msg.seq] = answer
        engaged = self._engaged
        if standing is Standing.CROSSING and engaged is not None and not engaged.movable:
            self._withdraw(engaged, now)  # gossip.crossing, step 3
        return answer
