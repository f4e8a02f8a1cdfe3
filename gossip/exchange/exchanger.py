"""The exchange protocol between neighbours, as a sans-IO state machine: exact jumps by design.

Theory of operation
-------------------
Edge e = {v, w} fires at rate ``P_e`` per unit of t. Its clock is split between its ends: each
end fires it at ``P_e / 2`` and *initiates* the exchange; the other end *serves* it. A jump
must use both ends' values at one time T (the paper's Section 6; in general the exchanged values
``u = g(x)`` of the paper's Section 7), as the sequential model does. The rule that gives this:

**The rule.** Each node holds a lock: it is *engaged* from the moment it starts an exchange
until that exchange is settled, and it keeps ``L``, the latest time of a jump it applied.

1. A tick of edge e, due at ``t_k``, at v: if v is engaged, the tick waits (in arrival order,
   :mod:`gossip.exchange.waiting`) and fires when v is free: late, never dropped. Once free, v
   engages and takes the jump time ``T = max(t_k, L_v, floor)``: the tick's own time, unless v
   already jumped later (``floor`` is a refused request's, step 3; T never goes back more than half
   the max skew). A tick that waited thus still jumps when the model says, if nothing came
   between: late application is exact (docs/design.md), so only its reply is late. v computes
   ``(x_v, z_v)(T)`` from its ledger and sends ``Request(edge, seq, T, u_v, z_v)``: with
   ``z_v``, w may *move* the jump later (gossip's ``u = x``); an exchanged ``u = g(x)``
   (the paper's Section 7), which w cannot compute, is sent without it and cannot move.
2. The server w refuses, with a :class:`~gossip.wire.schema.Busy`, if ``L_w > T`` and the jump
   cannot move. If w is engaged, the request *waits* (:data:`DEFERRED`,
   :mod:`gossip.exchange.deferral`) until w's own exchange settles, then is decided as a new one,
   unless it cannot move and is older than w's exchange (w's L will pass it: refused). If w's
   exchange is with v itself (each asked the other), :mod:`gossip.exchange.crossing` decides: the
   higher id serves at once, the lower catches the other's values up past that jump (or, if they
   cannot move, the higher id withdraws its own request and starts it again at once): neither is
   refused. A request still waiting after ``wait_limit`` (by default the first timeout, a few round
   trips) is refused. Otherwise w serves it at ``T_s = max(T, L_w)``: it mixes v's pair from T
   to T_s in closed form if T_s > T (v is engaged: it applies nothing meanwhile, so that is v's
   pair at T_s; counted in ``counters.postponed``), computes ``u_w(T_s)`` from its ledger,
   applies ``-flow`` at T_s (:func:`gossip.model.jumps.edge_flow`, with the edge's step), sets
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

**Exact, and free of deadlock.** Every node applies its jumps in non-decreasing order of their
times, each with both ends' values at its time, so the network equals a sequential replay of its
jumps sorted by time, whatever the latencies, and the mass stays exact (opposite flows at one
T). Every wait is bounded (by the server's own exchange, by the crossing rule, or by
``wait_limit``), and refused activations back off at random, so no cycle of waits lasts. The
proofs: docs/design.md, "Why the exchange is exact". The tests check the claim against a
sequential replay (tests/gossip/exchange/test_exchange_exact.py).

Rules for the bad days, stated in full in docs/design.md ("The bad days"): a request not
answered in time is re-sent as the same frame (same seq, T and values; the server's cache applies
it once); a peer silent for :data:`~gossip.exchange.vocabulary.STUCK_RETRIES` retries has its
lock released and is handed out by :meth:`Exchanger.take_silent`; a time more than ``max_skew``
ahead (or a new request as far behind) is rejected; a closed or recovering server Nacks new
requests; nothing from a peer changes the state unless it decodes, comes from the neighbour at
the other end of its edge and is finite. ``exclusive=False`` turns the lock off, which is not
exact: it exists to show the difference.

The transitions are data (:mod:`gossip.exchange.vocabulary`). :class:`Exchanger` dispatches to
the parts it owns, all sharing one :class:`~gossip.exchange.vocabulary.ExchangeState`: step 1 is
:mod:`gossip.exchange.initiating`'s (with :mod:`~gossip.exchange.waiting` and
:mod:`~gossip.exchange.rto`), step 2 :mod:`gossip.exchange.serving`'s (with
:mod:`~gossip.exchange.deferral`), step 3 :mod:`gossip.exchange.answers`'. A restarted node takes
its ledger back, and Nacks until then (:mod:`gossip.exchange.recovery`, also how it announces a
new address); a closed node exits once its neighbours can no longer need its answers
(:mod:`gossip.exchange.parting`); the view switch is :mod:`gossip.exchange.switching`. Time comes
in as ``now``, Unix seconds on the caller's clock; the protocol's t is ``rate * (now - epoch)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError, GossipError, LocalError, ProtocolError
from continuized.gossip.exchange.answers import Answers
from continuized.gossip.exchange.clockskew import ClockOffsets
from continuized.gossip.exchange.initiating import ExchangeValue, Initiator
from continuized.gossip.exchange.parting import Parting
from continuized.gossip.exchange.recovery import Recovery
from continuized.gossip.exchange.rto import RetryTimer
from continuized.gossip.exchange.serving import DEFERRED, Server
from continuized.gossip.exchange.switching import Views
from continuized.gossip.exchange.trace import Trace
from continuized.gossip.exchange.vocabulary import (
    Counters,
    EdgeState,
    Event,
    ExchangeState,
    Link,
    Outgoing,
    TimeBase,
)
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.wire.schema import (
    Busy,
    Done,
    Frame,
    LedgerReply,
    LedgerRequest,
    Message,
    Moved,
    Nack,
    Reply,
    Request,
    decode,
)

__all__ = ["DEFERRED", "Exchanger"]

FloatArray = NDArray[np.float64]


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
        ``u = g(x)``, see :data:`~gossip.exchange.initiating.ExchangeValue`; ``None``: ``u = x``.
    exclusive : bool
        The lock of the module header. ``False`` is for showing what it prevents.
    rng : numpy Generator, int or None
        Randomness of the back-off pauses (a seed; ``None``: seeded by ``node_id``).
    backoff : float
        Pause scale, in seconds, before a round trip is measured (then the smoothed one).
    trace : Trace or None
        Exact samples of this node's values on a grid of times (:mod:`gossip.exchange.trace`), read
        just before each jump; ``None``: none.
    wait_limit : float or None
        Longest a request waits for this node's exchange, in seconds, before it is refused
        (it breaks a cycle of waits: module header). ``None``: the current first timeout
        (:meth:`current_timeout`), a few round trips.

    Attributes
    ----------
    recovery : gossip.exchange.recovery.Recovery
        A restarted node's ledger requests and address announcements, and the neighbours'
        new addresses (``recovery.moved``, ``recovery.take_moved()``).
    parting : gossip.exchange.parting.Parting
        A closed node's Dones to its neighbours (``parting.goodbyes()``), and whether it may
        exit (``parting.parted``).
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
        if sorted(link.edge for link in links) != sorted(ledger.edges):
            raise ConfigError(
                f"links {[link.edge for link in links]} and ledger edges {list(ledger.edges)} "
                "differ"
            )
        self.node_id = node_id
        self.timebase = timebase
        self.exclusive = exclusive
        self.max_skew_t = float(max_skew) * timebase.rate
        self.trace = (
            trace  # exact samples on a grid of times (gossip.exchange.trace), read before jumps
        )
        self.timeout = float(timeout)
        edges = {link.edge: EdgeState(link) for link in links}
        self._state = ExchangeState(
            node_id, timebase, ledger, edges, self.max_skew_t, exclusive=exclusive, trace=trace
        )
        self.counters: Counters = self._state.counters
        timer = RetryTimer(self.timeout, min_timeout, max_timeout)
        self.min_timeout = timer.low
        self._timer = timer
        self._initiator = Initiator(
            self._state,
            timer,
            max_timeout=max_timeout,
            max_in_flight=max_in_flight,
            exchange_value=exchange_value,
            on_free=self._serve_deferred,
        )
        self.max_timeout = self._initiator.max_timeout
        self._views = Views(self._state)
        self._answers = Answers(
            self._state, self._initiator, timer, self._views, rng=rng, backoff=backoff
        )
        self.recovery = Recovery(self._state, recover)
        self.parting = Parting(self._state)
        self._server = Server(
            self._state, self._initiator, self._answers, self.recovery, c=c, wait_limit=wait_limit
        )

    def _serve_deferred(self, now: float) -> None:
        # The lock is free (gossip.exchange.initiating): the requests that waited for it go first.
        self._server.serve_deferred(now)

    # --- introspection: read-only views of the parts' state --------------------------------------
    @property
    def ledger(self) -> Ledger:
        """The node's state (replaced at a view switch)."""
        return self._state.ledger

    @property
    def eta(self) -> float:
        """The current view's ``eta``."""
        return self._state.eta

    @property
    def c(self) -> float:
        """The current view's jump coupling of the second variable."""
        return self._server.c

    @property
    def links(self) -> tuple[Link, ...]:
        """The node's edges."""
        return tuple(state.link for state in self._state.edges.values())

    @property
    def open(self) -> bool:
        """False once :meth:`close` was called."""
        return self._state.open

    @property
    def horizon(self) -> float:
        """Every jump of the current view has ``T < horizon``: set it to the next view's start
        once announced (:mod:`gossip.exchange.membership`)."""
        return self._state.horizon

    @horizon.setter
    def horizon(self, t: float) -> None:
        self._state.horizon = t

    @property
    def wait_limit(self) -> float | None:
        """Longest a request waits for our exchange, in seconds (``None``: the first timeout)."""
        return self._server.wait_limit

    @wait_limit.setter
    def wait_limit(self, seconds: float | None) -> None:
        self._server.wait_limit = seconds

    @property
    def recovering(self) -> bool:
        """True until every edge's ledger has been recovered from its neighbour."""
        return self._state.unrecovered > 0

    @property
    def pending(self) -> int:
        """Number of exchanges this node started that are not settled yet."""
        return self._initiator.pending

    @property
    def engaged(self) -> bool:
        """True while an exchange this node started holds its lock."""
        return self._initiator.engaged is not None

    @property
    def waiting(self) -> int:
        """Number of activations owed: ticks waiting for the lock, refused ones backing off."""
        return self._initiator.waiting

    @property
    def first_exchange_wall(self) -> float | None:
        """Unix time of the first exchange applied here, either end (``None``: none yet)."""
        return self._state.first_wall

    @property
    def last_jump_time(self) -> float:
        """``L``: the latest time (units of t) of a jump applied here; ``-inf`` before any."""
        return self._state.last

    def state(self, now: float) -> tuple[float, FloatArray, FloatArray]:
        """Return ``(t, x, z)`` at Unix time ``now``."""
        t = self.timebase.t(now)
        x, z = self._state.ledger.state(t)
        return t, x, z

    def activations(self) -> dict[int, int]:
        """Return, per peer id, the exchanges applied at this end on the shared edge."""
        return {state.link.peer: state.activations for state in self._state.edges.values()}

    def current_timeout(self) -> float:
        """Return the first timeout of a new exchange, in seconds (adapted to round trips)."""
        return self._timer.timeout()

    def lag(self) -> dict[str, float]:
        """Return the p50 and p99 lag (units of t) of recent jumps behind their ticks (0: none)."""
        return self._answers.lag()

    def wait(self) -> dict[str, float]:
        """Return the p50 and p99 wait (units of t) of recent exchanges' last start behind
        their ticks (0: none): the backlog, :func:`gossip.exchange.lateness.keeps_up`."""
        return self._answers.wait()

    def clock_offsets(self) -> ClockOffsets:
        """Return each neighbour's clock offset against ours, as the replies bound it
        (:mod:`gossip.exchange.clockskew`)."""
        return self._answers.clocks

    def rtt_ms(self) -> dict[str, float]:
        """Return the p5, p50 and p99 round trip, in milliseconds, of recent exchanges (0 if
        none): :meth:`gossip.exchange.rto.RetryTimer.percentiles_ms`."""
        return self._timer.percentiles_ms()

    def measured(self) -> tuple[int, int]:
        """Return how many samples the figures above are taken from: ``(round trips, lags)``
        (the lags and the waits come from the same exchanges). A 0 means the figure is
        unknown, not 0: a node that has completed none of its own exchanges measured nothing."""
        return self._timer.measured(), self._answers.measured()

    # --- what to send ---------------------------------------------------------------------------
    def take_silent(self) -> set[int]:
        """Return (and forget) the peers silent for another
        :data:`~gossip.exchange.vocabulary.STUCK_RETRIES` retries: the shell may check its way to
        them (:meth:`node.transport.interface.Transport.redial`); re-sending cannot mend a dead
        connection."""
        return self._initiator.take_silent()

    def take_outgoing(self) -> list[Outgoing]:
        """Return (and forget) the requests started since the last call: waiting ticks that
        started when the lock was freed by :meth:`receive`. Send them after each call."""
        return self._initiator.take_outgoing()

    def take_released(self) -> list[tuple[bytes | None, Frame]]:
        """Return (and forget) the answers to deferred requests, with the routes given to
        :meth:`receive`: send them after each call, like :meth:`take_outgoing`."""
        return self._server.take_released()

    # --- initiating -----------------------------------------------------------------------------
    def initiate(self, edge: int, now: float, due: float = math.nan) -> Outgoing | None:
        """Handle a tick of ``edge``'s clock at this end; return the request to send, if any.

        ``due`` is the time (units of t) the clock rang, if known: the jump's lag behind it is
        recorded (:meth:`lag`). ``None``: the tick waits for the lock (it starts through
        :meth:`take_outgoing` or :meth:`expire`), or is skipped (counted): the edge is stuck,
        ``max_in_flight`` are pending on it, the node is recovering or closed.
        """
        return self._initiator.initiate(edge, now, due)

    def next_deadline(self) -> float | None:
        """Return the earliest retry deadline, or limit of a waiting request (Unix seconds)."""
        times = (self._initiator.next_deadline(), self._server.next_limit())
        return min((t for t in times if t is not None), default=None)

    def next_start(self) -> float | None:
        """Return when (Unix seconds) the node, free, pausing after a refusal, starts again."""
        return self._initiator.next_start()

    def expire(self, now: float) -> list[Outgoing]:
        """Return what to send at ``now``: requests re-sent because their timeout passed, and
        activations started (their pause is over, or the lock was released); and refuse the
        requests that waited their limit (:meth:`take_released`)."""
        out = self._initiator.expire(now)
        self._server.expire(now)
        return out

    def stop_initiating(self) -> int:
        """Start nothing more (the node is stopping); return the activations dropped."""
        return self._initiator.stop_initiating()

    def abandon_all(self) -> int:
        """Give up on everything pending (the node is exiting), counted as failed; return how
        much there was. The peer may have applied some: the one case where the sums can
        break, and why stopping waits for pending exchanges first."""
        return self._initiator.abandon_all()

    def settle(self) -> None:
        """Do the ledger's deferred arithmetic (:meth:`gossip.model.ledger.Ledger.settle`).

        A model's ledger books a jump's flow lazily, so that a server sends its Reply before
        it adds the flow to its own rows, and an initiator adds a Reply's flow while it builds
        its next request. Call this when the node is idle, after sending what
        :meth:`receive` or :meth:`initiate` returned, to do the rest while the frame is on
        the wire; skipping it only moves that work to the ledger's next read.
        """
        self._state.ledger.settle()

    def close(self) -> None:
        """Stop initiating, and answer new requests with a Nack (cached ones are still
        answered; so are deferred ones, through :meth:`take_released`)."""
        self._state.open = False
        self._initiator.stop_initiating()
        self._server.serve_deferred(math.nan)  # closed: each gets a Nack

    def switch_view(self, ledger: Ledger, links: Sequence[Link], c: float, start: float) -> int:
        """Go on in the next membership view from time ``start``
        (:mod:`gossip.exchange.membership`).

        ``ledger`` is :func:`gossip.exchange.membership.carry_ledger`'s (the settled edges dropped,
        the new ``eta`` from ``start``). Kept edges keep their sequence numbers, caches and
        pending exchanges (a late reply of the old view is placed exactly); a settled edge is
        forgotten, so anything on it later is rejected and counted, never applied. From here
        on a request at ``T < start`` is refused (``L >= start``). Returns the exchanges
        dropped with the settled edges (counted as failed: harmless, their rows are gone).

        Raises
        ------
        LocalError
            The node is engaged (switch when it is free), or the links and ledger differ.
        """
        if self._initiator.engaged is not None:
            raise LocalError("switch_view needs a free node; it is engaged in an exchange")
        gone = self._views.switch(ledger, links, start)
        dropped = sum(len(state.pending) for state in gone.values())
        for edge in gone:
            self._server.deferred.forget(edge, math.inf)
        self._initiator.forget(dropped)
        self._server.c = float(c)
        self.counters.failed += dropped
        return dropped

    # --- receiving ------------------------------------------------------------------------------
    def receive(
        self, frame: Frame, now: float, route: bytes | None = None, sender: int | None = None
    ) -> Frame | None:
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

    def _dispatch(self, message: Message, now: float, route: bytes | None) -> Frame | None:
        if isinstance(message, Request):
            return self._server.on_request(message, now, route)
        if isinstance(message, Reply):
            self._answers.on_answer(message, Event.REPLY, now)
            return None
        if isinstance(message, Busy):
            # Its t becomes the floor of our next request's T: one far ahead would make every
            # later request of ours absurd (refused by the peer, the edge stuck for good).
            self._state.check_time(message.t, now)
            self._answers.on_answer(message, Event.BUSY, now)
            return None
        if isinstance(message, Nack):
            self._answers.on_answer(message, Event.NACK, now)
            return None
        if isinstance(message, LedgerRequest):
            return self.recovery.on_ledger_request(message, now)
        if isinstance(message, LedgerReply):
            self.recovery.on_ledger_reply(message, now)
            return None
        if isinstance(message, Moved):
            self.recovery.on_moved(message, route)
            return None
        if isinstance(message, Done):
            return self.parting.on_done(message, route)
        raise ProtocolError(f"a {message.TYPE} message is not part of the exchange protocol")
