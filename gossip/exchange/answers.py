"""What an initiator does with the answers to its requests (step 3 of
:mod:`gossip.exchange.exchanger`'s rule): a reply's flow applied at the reply's time, a Busy's
random pause before the activation is tried again (none for the first refusal of a request that
cannot move, when the server had jumped past it), a Nack's exchange given up; and a request
of its own withdrawn when it served a crossing request that cannot move
(:mod:`gossip.exchange.crossing`).
"""

from __future__ import annotations

import math

import numpy as np

from continuized.gossip.errors import ConfigError, ProtocolError
from continuized.gossip.exchange.clockskew import ClockOffsets
from continuized.gossip.exchange.crossing import remember_applied
from continuized.gossip.exchange.initiating import Initiator
from continuized.gossip.exchange.lateness import LagRecord
from continuized.gossip.exchange.rto import RetryTimer
from continuized.gossip.exchange.switching import Views
from continuized.gossip.exchange.vocabulary import (
    INITIATOR_TRANSITIONS,
    Action,
    EdgeState,
    Event,
    ExchangeState,
    Pending,
    Phase,
)
from continuized.gossip.exchange.waiting import Activation, backoff_delay
from continuized.gossip.wire.schema import Busy, Nack, Reply

__all__ = ["Answers"]


class Answers:
    """The answers to one node's requests: applied, backed off from, or given up.

    Parameters
    ----------
    state : ExchangeState
        The node's shared state.
    initiator : Initiator
        The node's initiating part: it settles each answered exchange and owes refused
        activations again.
    timer : RetryTimer
        Sampled with each answered exchange's round trip; its smoothed round trip scales the
        pause after a refusal.
    views : Views
        Places a late reply of the previous membership view.
    rng : numpy Generator, int or None
        Randomness of the pauses after a refusal (a seed; ``None``: seeded by the node id).
    backoff : float
        Pause scale, in seconds, until a round trip is measured.
    """

    def __init__(
        self,
        state: ExchangeState,
        initiator: Initiator,
        timer: RetryTimer,
        views: Views,
        *,
        rng: np.random.Generator | int | None,
        backoff: float,
    ):
        if not (math.isfinite(backoff) and backoff > 0):
            raise ConfigError(f"backoff must be > 0 seconds, got {backoff!r}")
        self._state = state
        self._initiator = initiator
        self._timer = timer
        self._views = views
        self._rng = np.random.default_rng(state.node_id if rng is None else rng)
        self._backoff = float(backoff)
        self._lags = LagRecord()  # jump time behind the tick: the departure from the model
        self.clocks = ClockOffsets()
        """Each peer's clock offset against ours, bounded by the replies' stamps."""
        self._waits = LagRecord()  # start behind the tick: the backlog (gossip.exchange.lateness)

    def lag(self) -> dict[str, float]:
        """Return the p50 and p99 lag (units of t) of recent jumps behind their ticks (0: none)."""
        return self._lags.percentiles()

    def measured(self) -> int:
        """Return how many exchanges :meth:`lag` and :meth:`wait` are taken from (0: unknown)."""
        return len(self._lags)

    def wait(self) -> dict[str, float]:
        """Return the p50 and p99 wait (units of t) of recent exchanges' last start behind
        their ticks (0: none): the backlog, :func:`gossip.exchange.lateness.keeps_up`."""
        return self._waits.percentiles()

    def on_answer(self, msg: Reply | Busy | Nack, event: Event, now: float) -> None:
        """Handle the answer ``msg`` (``event`` says which kind) to a request of ours.

        Raises
        ------
        ProtocolError
            The answer is to a request never sent, or a reply is not applicable (its time, its
            dimension); nothing is changed then.
        """
        state = self._state.edge_from(msg.src, msg.edge)
        pending = state.pending.get(msg.seq)
        if pending is None:
            if msg.seq >= state.next_seq:
                raise ProtocolError(f"answer to exchange {msg.seq} on edge {msg.edge}: never sent")
            self._state.counters.duplicates += 1
            return
        _, action = INITIATOR_TRANSITIONS[(pending.phase, event)]
        if action is Action.APPLY:
            assert isinstance(msg, Reply)
            self._apply_reply(state, pending, msg, now)  # raises before any change
        elif action is Action.BACK_OFF:
            assert isinstance(msg, Busy)
            self._state.counters.bounced += 1
            bounces = pending.bounces + 1
            if bounces == 1 and msg.t > pending.t and not pending.movable:
                # The server had jumped past our T, which it cannot move: it answered with
                # its floor, and a new request at that floor is likely served. No pause: we
                # served what waited for us first (settle), so no cycle of waits re-forms.
                ready = now
            else:
                rtt = self._timer.srtt() or self._backoff
                ready = now + backoff_delay(bounces, rtt, self._rng)
            activation = Activation(msg.edge, ready, msg.t, bounces, due=pending.due)
            self._initiator.owe_again(activation)
        else:
            self._state.counters.failed += 1
        self._initiator.settle(state, pending, now)

    def withdraw(self, pending: Pending, now: float) -> None:
        """Drop our request ``pending``, unanswered: we served a crossing request of its
        server's, and it cannot move (:mod:`gossip.exchange.crossing`, step 3). Its activation
        starts again at once, first: with our values after that jump."""
        _, action = INITIATOR_TRANSITIONS[(pending.phase, Event.WITHDRAW)]
        assert action is Action.RESTART
        self._state.counters.withdrawn += 1
        self._initiator.owe_again(
            Activation(pending.edge, bounces=pending.bounces, due=pending.due)
        )
        self._initiator.settle(self._state.edges[pending.edge], pending, now)

    def _apply_reply(self, state: EdgeState, pending: Pending, msg: Reply, now: float) -> None:
        shared = self._state
        shared.check_dim("dx", msg.dx)
        t = msg.t
        if t != pending.t and not (pending.movable and t > pending.t):
            valid = f">= {pending.t!r}" if pending.movable else f"{pending.t!r}"
            raise ProtocolError(
                f"reply to exchange {msg.seq} on edge {msg.edge} has t={t!r}; valid: {valid} "
                "(the request's time, or later if it let the server move it)"
            )
        if t > pending.t:
            shared.check_time(t, now)  # moved: not absurdly far ahead of us
        if t < shared.view_start:  # of the previous view (gossip.exchange.membership.Switch)
            dx, dz = self._views.carried(msg)
            shared.ledger.add_values(msg.edge, dx, dz, shared.view_start)
            remember_applied(state, msg.seq, None)  # of the old view: nothing catches up past it
        else:
            shared.book_jump(msg.edge, msg.dx, msg.dz, t)
            remember_applied(state, msg.seq, (t, msg.dx, msg.dz))
        shared.last = max(shared.last, t)
        state.activations += 1
        if shared.first_wall is None:
            shared.first_wall = now
        if pending.due == pending.due:  # not NaN: the tick's time is known
            self._lags.add(t - pending.due)
            self._waits.add(shared.timebase.t(pending.first_sent) - pending.due)
        self._timer.sample(now - pending.first_sent, retried=pending.phase is not Phase.SENT)
        # The peer answered between our first send and now: a bound on its clock's offset.
        self.clocks.add(state.link.peer, pending.first_sent, msg.wall, now)
