"""The initiating side of a node's exchanges: its lock, the activations it owes, the requests
it started and their retries.

:mod:`gossip.exchange` states the rules ("Theory of operation") and adds the serving side;
this module carries out step 1 of the rule: a tick waits while the node is engaged, starts at
``T = max(t_k, L, floor)`` with the node's values at T, and re-sends the same frame on a
timeout. What the node does with the answers (step 3) is :mod:`gossip.answers`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from gossip.errors import ConfigError, LocalError, ProtocolError
from gossip.lateness import LagRecord
from gossip.ledger import Ledger
from gossip.protocol import (
    INITIATOR_TRANSITIONS,
    SEQ_WINDOW,
    STUCK_RETRIES,
    Action,
    Counters,
    EdgeState,
    Event,
    Link,
    Outgoing,
    Pending,
    TimeBase,
)
from gossip.rto import RetrySchedule, RetryTimer
from gossip.trace import Trace
from gossip.waiting import Activation, Waiting
from gossip.wire import Request, encode

__all__ = ["ExchangeValue", "Initiator"]

FloatArray = NDArray[np.float64]

ExchangeValue = Callable[[FloatArray], ArrayLike]
"""Maps a node's first variable (``x``, or ``y`` in SPEC section 6) at T to the value it
exchanges, ``u``, of the same dimension. The default is the identity (gossip)."""


class Initiator:
    """One node, as the initiator of its exchanges (the base of
    :class:`gossip.exchange.Exchanger`, whose parameters these are)."""

    def __init__(
        self,
        node_id: int,
        links: Sequence[Link],
        ledger: Ledger,
        timebase: TimeBase,
        *,
        timeout: float,
        max_timeout: float,
        min_timeout: float,
        max_skew: float,
        recover: bool,
        max_in_flight: int | None,
        exchange_value: ExchangeValue | None,
        exclusive: bool,
        rng: np.random.Generator | int | None,
        backoff: float,
        trace: Trace | None,
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
        self.eta = ledger.eta
        self.timebase = timebase
        self.max_skew_t = float(max_skew) * timebase.rate
        self.timeout = float(timeout)
        self.max_timeout = float(max_timeout)
        self._timer = RetryTimer(self.timeout, min_timeout, self.max_timeout)
        self._lags = LagRecord()  # jump time behind the tick: the departure from the model
        self._waits = LagRecord()  # start behind the tick: the backlog (gossip.lateness)
        self.min_timeout = self._timer.low
        self.max_in_flight = max_in_flight
        self.exclusive = exclusive
        self.counters = Counters()
        self.open = True
        self.initiating = True
        self._edges = {link.edge: EdgeState(link, recovered=not recover) for link in links}
        self._unrecovered = len(self._edges) if recover else 0
        # An edge may be gone (settled at a view switch): its stale deadlines are skipped.
        self._deadlines = RetrySchedule(
            lambda edge, seq: s.pending.get(seq) if (s := self._edges.get(edge)) else None
        )
        self._in_flight = 0  # exchanges started here and pending, all edges
        self._engaged: Pending | None = None  # the exchange holding the lock
        self._last = -math.inf  # L: the latest time of a jump applied here
        self._waiting = Waiting()
        self._outbox: list[Outgoing] = []
        self._silent: set[int] = set()  # peers that just let an exchange go stuck
        self._value = exchange_value
        self.trace = trace  # exact samples on a grid of times (gossip.trace), read before jumps
        self._rng = np.random.default_rng(node_id if rng is None else rng)
        self._backoff = float(backoff)
        # Membership views (gossip.membership): jumps of the current view have T < horizon;
        # the previous view's eta and interval place its late replies exactly.
        self.horizon = math.inf
        self._view_start = -math.inf
        self._old_eta = self.eta
        self._old_start = -math.inf

    # --- introspection --------------------------------------------------------------------------
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

    def lag(self) -> dict[str, float]:
        """Return the p50 and p99 lag (units of t) of recent jumps behind their ticks (0: none)."""
        return self._lags.percentiles()

    def wait(self) -> dict[str, float]:
        """Return the p50 and p99 wait (units of t) of recent exchanges' last start behind
        their ticks (0: none): the backlog, :func:`gossip.lateness.keeps_up`."""
        return self._waits.percentiles()

    def rtt_ms(self) -> dict[str, float]:
        """Return the p50 and p99 round trip, in milliseconds, of recent exchanges (0 if none)."""
        return self._timer.percentiles_ms()

    def take_silent(self) -> set[int]:
        """Return (and forget) the peers that left an exchange unanswered for another
        :data:`~gossip.protocol.STUCK_RETRIES` retries since the last call.

        The shell may check its way to them (:meth:`node.transport.Transport.redial`): the
        protocol re-sends the same frame, which cannot help if the connection is dead.
        """
        out, self._silent = self._silent, set()
        return out

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
        answer = self._value(np.array(x, dtype=np.float64))
        values = (
            answer
            if isinstance(answer, np.ndarray) and answer.dtype == np.float64
            else np.asarray(answer, dtype=np.float64)
        )
        u: list[float] = values.ravel().tolist()
        # One sum on plain floats instead of numpy's isfinite and all: numpy calls on a
        # d-vector cost more than the loop, with the caches as cold as many node processes on
        # few cores leave them. The sum is inf or nan if a value is (or if finite ones overflow).
        total = sum(u)
        overflowed = total - total != 0.0  # then look at each value
        if len(u) != self.ledger.dim or (overflowed and not all(map(math.isfinite, u))):
            raise LocalError(
                f"exchange_value returned {answer!r}; it must be {self.ledger.dim} finite numbers"
            )
        return u

    # --- initiating -----------------------------------------------------------------------------
    def initiate(self, edge: int, now: float, due: float = math.nan) -> Outgoing | None:
        """Handle a tick of ``edge``'s clock at this end; return the request to send, if any.

        ``due`` is the time (units of t) the clock rang, if the caller knows it: the lag of the
        jump behind it is then recorded (:meth:`lag`, :mod:`gossip.lateness`).

        Returns ``None`` if the tick waits for the lock (it starts later, through
        :meth:`take_outgoing` or :meth:`expire`), or if it is skipped (counted): the edge is
        stuck, ``max_in_flight`` are pending on it, the node is recovering or closed.
        """
        if not self.exclusive or (self._engaged is None and not self._waiting):
            return self._start(Activation(edge, due=due), now)
        if not self._startable(edge):
            self.counters.skipped += 1
            return None
        self._waiting.add(Activation(edge, due=due))  # behind older ones: engaged, or pausing
        self.counters.waited += 1
        if self._engaged is not None:
            return None
        before = len(self._outbox)
        self._start_waiting(now)  # the first owed one, if its pause is over: at most one
        started = self._outbox[before:]
        del self._outbox[before:]
        return started[0] if started else None

    def _startable(self, edge: int) -> bool:
        state = self._edges.get(edge)
        if state is None:  # a tick of an edge settled at a view switch
            return False
        limit = self.max_in_flight
        return not (
            state.stuck
            or (limit is not None and len(state.pending) >= limit)
            # The server rejects a request numbered beyond ack + SEQ_WINDOW (its bound on what
            # it caches): without the lock and a limit, do not start one it would reject.
            or state.next_seq - state.ack() > SEQ_WINDOW
            or not (self.open and self.initiating)
            or self._unrecovered
        )

    def _start(self, activation: Activation, now: float) -> Outgoing | None:
        if not self._startable(activation.edge):
            self.counters.skipped += 1
            return None
        state = self._edges[activation.edge]
        t = self._jump_time(activation, now)
        if t >= self.horizon:  # of the next view: the node switches first (gossip.membership)
            self.counters.skipped += 1
            return None
        seq = state.next_seq
        # Gossip (u = x) lets the server move the jump to its own later L: it can mix our
        # (x, z) there itself. An exchanged g(x) it cannot compute: that jump stays at T.
        movable = self._value is None and self.exclusive
        if movable:
            x, z = self.ledger.state_values(t)
            u, z_sent = tuple(x), tuple(z)
        else:
            u, z_sent = tuple(self._exchanged(t)), None
        request = Request(
            src=self.node_id,
            edge=state.link.edge,
            seq=seq,
            ack=state.ack(),
            t=t,
            u=u,
            z=z_sent,
            served=state.max_seen,  # u and z include our answers up to it (crossing requests)
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
            due=activation.due,
            movable=movable,
        )
        state.pending[seq] = pending
        self._in_flight += 1
        if self.exclusive:
            self._engaged = pending
        self._deadlines.arm(pending)
        self.counters.initiated += 1
        return Outgoing(state.link.peer, frame)

    def _jump_time(self, activation: Activation, now: float) -> float:
        """Return the T of a request: the tick's own time where the lock allows it."""
        now_t = self.timebase.t(now)
        # A tick that waited (for our lock, or for the machine) still jumps at its own time if
        # nothing was applied here since (T >= L): late application is exact, so only its
        # reply is late, not the jump. Never further back than half the skew a server accepts.
        due = activation.due if activation.due == activation.due else now_t
        return max(due, now_t - 0.5 * self.max_skew_t, self._last, activation.not_before)

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
            self._serve_deferred(now)  # requests that waited for us go first
            self._start_waiting(now)

    def _serve_deferred(self, now: float) -> None:
        """Serve the requests that waited for this node to be free (the serving side's)."""

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
            if pending.retries % STUCK_RETRIES == 0:
                self._silent.add(pending.peer)  # again and again, while it stays silent
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

    # --- answers to our requests ----------------------------------------------------------------
    def _edge_from(self, src: int, edge: int) -> EdgeState:
        state = self._edges.get(edge)
        if state is None or state.link.peer != src:
            raise ProtocolError(
                f"edge {edge} from node {src} is not an edge of node {self.node_id}"
            )
        return state

    def _book_jump(
        self, edge: int, dx: Sequence[float], dz: Sequence[float], t: float, sign: float = 1.0
    ) -> None:
        """Book ``sign * (dx, dz)`` at t in the ledger (it raises before any change), reading the
        trace's grid times before t first: every jump of either side goes through here."""
        if self.trace is not None:
            self.trace.before_jump(self.ledger, t)
        self.ledger.add_values(edge, dx, dz, t, sign=sign)

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
