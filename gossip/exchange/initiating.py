"""The initiating part of a node's exchanges: its lock, the activations it owes, the requests
it started and their retries.

:mod:`gossip.exchange.exchanger` states the rules ("Theory of operation"); :class:`Initiator`
carries out step 1 of the rule: a tick waits while the node is engaged, starts at
``T = max(t_k, L, floor)`` with the node's values at T, and re-sends the same frame on a
timeout. What the node does with the answers (step 3) is :mod:`gossip.exchange.answers`, which
settles them here (:meth:`Initiator.settle`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from continuized.gossip.errors import ConfigError, LocalError
from continuized.gossip.exchange.rto import RetrySchedule, RetryTimer
from continuized.gossip.exchange.vocabulary import (
    INITIATOR_TRANSITIONS,
    SEQ_WINDOW,
    STUCK_RETRIES,
    Action,
    EdgeState,
    Event,
    ExchangeState,
    Outgoing,
    Pending,
)
from continuized.gossip.exchange.waiting import Activation, Waiting
from continuized.gossip.model.mixing import Values
from continuized.gossip.wire.checks import Vector
from continuized.gossip.wire.schema import Request, encode

__all__ = ["ExchangeValue", "Initiator"]

FloatArray = NDArray[np.float64]

ExchangeValue = Callable[[FloatArray], ArrayLike]
"""Maps a node's first variable (``x``, or ``y`` in the paper's Section 7) at T to the value it
exchanges, ``u``, of the same dimension. The default is the identity (gossip)."""


class Initiator:
    """One node, as the initiator of its exchanges: the lock, the owed activations, the
    pending requests and their retry deadlines.

    Parameters
    ----------
    state : ExchangeState
        The node's shared state (edges, ledger, ``L``, open, recovering, view horizon).
    timer : RetryTimer
        The first timeout of a new exchange (the answers sample its round trips).
    max_timeout : float
        Largest retry timeout, in seconds (it doubles at each retry).
    max_in_flight : int or None
        Most exchanges started here and pending on one edge; ``None``: no limit.
    exchange_value : callable or None
        ``u = g(x)``, see :data:`ExchangeValue`; ``None``: ``u = x``.
    on_free : callable
        Called with ``now`` when the lock is freed, before any owed activation starts: the
        server answers the requests that waited for it first (:mod:`gossip.exchange.serving`).

    Examples
    --------
    >>> from continuized.gossip.model.ledger import Ledger
    >>> from continuized.gossip.exchange.vocabulary import Link, TimeBase
    >>> state = ExchangeState(0, TimeBase(0.0, 1.0), Ledger([1.0], [0], eta=0.1),
    ...                       {0: EdgeState(Link(0, 1, 1.0))}, max_skew_t=60.0, exclusive=True)
    >>> starter = Initiator(state, RetryTimer(0.2, 0.01, 2.0), max_timeout=2.0,
    ...                     max_in_flight=None, exchange_value=None, on_free=lambda now: None)
    >>> starter.initiate(0, now=1.0).peer, starter.pending, starter.engaged is not None
    (1, 1, True)
    >>> starter.initiate(0, now=1.1), starter.waiting  # engaged: the tick waits
    (None, 1)
    """

    def __init__(
        self,
        state: ExchangeState,
        timer: RetryTimer,
        *,
        max_timeout: float,
        max_in_flight: int | None,
        exchange_value: ExchangeValue | None,
        on_free: Callable[[float], None],
    ):
        if not max_timeout >= timer.initial > 0:
            raise ConfigError(
                f"need 0 < timeout <= max_timeout, got timeout={timer.initial!r}, "
                f"max_timeout={max_timeout!r}"
            )
        if max_in_flight is not None and max_in_flight < 1:
            raise ConfigError(f"max_in_flight must be >= 1 or None, got {max_in_flight!r}")
        self._state = state
        self._timer = timer
        self.max_timeout = float(max_timeout)
        self.max_in_flight = max_in_flight
        self._value = exchange_value
        self._on_free = on_free
        self.initiating = True  # False once stopping: start nothing, owe nothing
        # An edge may be gone (settled at a view switch): its stale deadlines are skipped.
        self._deadlines = RetrySchedule(
            lambda edge, seq: s.pending.get(seq) if (s := state.edges.get(edge)) else None
        )
        self.pending = 0  # exchanges started here and not settled, all edges
        self.engaged: Pending | None = None  # the exchange holding the lock
        self._waiting = Waiting()
        self._outbox: list[Outgoing] = []
        self._silent: set[int] = set()  # peers that just let an exchange go stuck

    @property
    def waiting(self) -> int:
        """Number of activations owed: ticks waiting for the lock, refused ones backing off."""
        return len(self._waiting)

    def current_timeout(self) -> float:
        """Return the first timeout of a new exchange, in seconds (adapted to round trips)."""
        return self._timer.timeout()

    def take_silent(self) -> set[int]:
        """Return (and forget) the peers that left an exchange unanswered for another
        :data:`~gossip.exchange.vocabulary.STUCK_RETRIES` retries since the last call."""
        out, self._silent = self._silent, set()
        return out

    def take_outgoing(self) -> list[Outgoing]:
        """Return (and forget) the requests started since the last call."""
        out, self._outbox = self._outbox, []
        return out

    @property
    def exchanges_x(self) -> bool:
        """Whether the exchanged value is ``x`` itself (gossip: no ``exchange_value``)."""
        return self._value is None

    def exchanged(self, t: float) -> Values:
        """Return ``u(t) = g(x(t))``, the value this node exchanges at time ``t``.

        Raises
        ------
        LocalError
            ``exchange_value`` returned something other than ``dim`` finite numbers.
        """
        ledger = self._state.ledger
        x = ledger.x_values(t)
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
        if len(u) != ledger.dim or (overflowed and not all(map(math.isfinite, u))):
            raise LocalError(
                f"exchange_value returned {answer!r}; it must be {ledger.dim} finite numbers"
            )
        return u

    # --- starting -------------------------------------------------------------------------------
    def initiate(self, edge: int, now: float, due: float = math.nan) -> Outgoing | None:
        """Handle a tick of ``edge``'s clock at this end; return the request to send, if any
        (:meth:`gossip.exchange.exchanger.Exchanger.initiate`)."""
        if not self._state.exclusive or (self.engaged is None and not self._waiting):
            return self._start(Activation(edge, due=due), now)
        if not self._startable(edge):
            self._state.counters.skipped += 1
            return None
        self._waiting.add(Activation(edge, due=due))  # behind older ones: engaged, or pausing
        self._state.counters.waited += 1
        if self.engaged is not None:
            return None
        before = len(self._outbox)
        self.start_waiting(now)  # the first owed one, if its pause is over: at most one
        started = self._outbox[before:]
        del self._outbox[before:]
        return started[0] if started else None

    def _startable(self, edge: int) -> bool:
        shared = self._state
        state = shared.edges.get(edge)
        if state is None:  # a tick of an edge settled at a view switch
            return False
        limit = self.max_in_flight
        return not (
            state.stuck
            or (limit is not None and len(state.pending) >= limit)
            # The server rejects a request numbered beyond ack + SEQ_WINDOW (its bound on what
            # it caches): without the lock and a limit, do not start one it would reject.
            or state.next_seq - state.ack() > SEQ_WINDOW
            or not (shared.open and self.initiating)
            or shared.unrecovered
        )

    def _start(self, activation: Activation, now: float) -> Outgoing | None:
        shared = self._state
        if not self._startable(activation.edge):
            shared.counters.skipped += 1
            return None
        state = shared.edges[activation.edge]
        t = self._jump_time(activation, now)
        if (
            t >= shared.horizon
        ):  # of the next view: the node switches first (gossip.exchange.membership)
            shared.counters.skipped += 1
            return None
        seq = state.next_seq
        # Gossip (u = x) lets the server move the jump to its own later L: it can mix our
        # (x, z) there itself. An exchanged g(x) it cannot compute: that jump stays at T.
        movable = self._value is None and shared.exclusive
        if movable:
            x, z = shared.ledger.wire_state(t)
            # A model's parameters stay an array: they go as raw parts (gossip.wire.schema).
            u: Vector = x if isinstance(x, np.ndarray) else tuple(x)
            z_sent: Vector | None = z if isinstance(z, np.ndarray) else tuple(z)
        else:
            u, z_sent = tuple(self.exchanged(t)), None
        request = Request(
            src=shared.node_id,
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
        timeout = self._timer.timeout()
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
        self.pending += 1
        if shared.exclusive:
            self.engaged = pending
        self._deadlines.arm(pending)
        shared.counters.initiated += 1
        return Outgoing(state.link.peer, frame)

    def _jump_time(self, activation: Activation, now: float) -> float:
        """Return the T of a request: the tick's own time where the lock allows it."""
        shared = self._state
        now_t = shared.timebase.t(now)
        # A tick that waited (for our lock, or for the machine) still jumps at its own time if
        # nothing was applied here since (T >= L): late application is exact, so only its
        # reply is late, not the jump. Never further back than half the skew a server accepts.
        due = activation.due if activation.due == activation.due else now_t
        return max(due, now_t - 0.5 * shared.max_skew_t, shared.last, activation.not_before)

    def start_waiting(self, now: float) -> None:
        """Free: start the first activation that may start (more if there is no lock); the
        requests go to :meth:`take_outgoing`."""
        while self.engaged is None:
            activation = self._waiting.take_ready(now)
            if activation is None:
                return
            out = self._start(activation, now)
            if out is not None:
                self._outbox.append(out)

    def owe_again(self, activation: Activation) -> None:
        """Owe ``activation`` again, first (refused or withdrawn): unless the node is stopping,
        when it is counted as skipped."""
        if self.initiating and self._state.open:
            self._waiting.add_first(activation)
        else:
            self._state.counters.skipped += 1

    # --- settling -------------------------------------------------------------------------------
    def settle(self, state: EdgeState, pending: Pending, now: float) -> None:
        """Forget ``pending`` (answered, refused or withdrawn) and free the lock if it held it."""
        del state.pending[pending.seq]
        self.pending -= 1
        if pending.retries >= STUCK_RETRIES:
            state.stuck -= 1
        self._disengage(pending, now)

    def _disengage(self, pending: Pending, now: float) -> None:
        if self.engaged is pending:
            self.engaged = None
            self._on_free(now)  # requests that waited for us go first
            self.start_waiting(now)

    def forget(self, count: int) -> None:
        """Forget ``count`` pending exchanges whose edges are gone (a view switch)."""
        self.pending -= count

    # --- time -----------------------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        """Return the earliest retry deadline (Unix seconds), or ``None`` if nothing is pending."""
        return self._deadlines.next()

    def next_start(self) -> float | None:
        """Return when (Unix seconds) the node, free, pausing after a refusal, starts again."""
        return None if self.engaged is not None else self._waiting.next_ready()

    def expire(self, now: float) -> list[Outgoing]:
        """Return what to send at ``now``: requests re-sent because their timeout passed, and
        activations started because their pause is over (or the lock was released)."""
        counters = self._state.counters
        out: list[Outgoing] = []
        while (pending := self._deadlines.pop_due(now)) is not None:
            state = self._state.edges[pending.edge]
            phase, action = INITIATOR_TRANSITIONS[(pending.phase, Event.TIMEOUT)]
            assert action is Action.RESEND
            pending.retries += 1
            pending.phase = phase
            pending.timeout = min(2.0 * pending.timeout, self.max_timeout)
            pending.deadline = now + pending.timeout
            self._deadlines.arm(pending)
            counters.retried += 1
            out.append(Outgoing(pending.peer, pending.frame))  # the same frame: same T and u
            if pending.retries % STUCK_RETRIES == 0:
                self._silent.add(pending.peer)  # again and again, while it stays silent
            if pending.retries == STUCK_RETRIES:
                state.stuck += 1
                if self.engaged is pending:  # a silent peer must not freeze this node
                    counters.released += 1
                    self._disengage(pending, now)
        self.start_waiting(now)
        out.extend(self.take_outgoing())
        return out

    # --- stopping -------------------------------------------------------------------------------
    def stop_initiating(self) -> int:
        """Start nothing more (the node is stopping); return the activations dropped."""
        self.initiating = False
        dropped = self._waiting.clear()
        self._state.counters.skipped += dropped
        return dropped

    def abandon_all(self) -> int:
        """Give up on everything pending (the node is exiting); return how much there was,
        counted as failed (:meth:`gossip.exchange.exchanger.Exchanger.abandon_all`)."""
        count = 0
        for state in self._state.edges.values():
            count += len(state.pending)
            state.pending.clear()
            state.stuck = 0
        self._deadlines.clear()
        self.pending = 0
        self.engaged = None
        self.stop_initiating()
        self._state.counters.failed += count
        return count
