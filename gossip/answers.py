"""What an initiator does with the answers to its requests (step 3 of
:mod:`gossip.exchange`'s rule): a reply's flow applied at the reply's time, a Busy's random
pause before the activation is tried again (none for the first refusal of a request that
cannot move, when the server had jumped past it), a Nack's exchange given up; and a request
of its own withdrawn when it served a crossing request that cannot move
(:mod:`gossip.crossing`).
"""

from __future__ import annotations

from gossip.crossing import remember_applied
from gossip.errors import ProtocolError
from gossip.initiating import Initiator
from gossip.mixing import mix_values
from gossip.protocol import (
    INITIATOR_TRANSITIONS,
    STUCK_RETRIES,
    Action,
    EdgeState,
    Event,
    Pending,
    Phase,
)
from gossip.waiting import Activation, backoff_delay
from gossip.wire import Busy, Nack, Reply

__all__ = ["Answering"]


class Answering(Initiator):
    """One node, as the initiator of its exchanges, with the answers handled (the base of
    :class:`gossip.recovery.Recovering`; :class:`gossip.exchange.Exchanger` documents the
    parameters)."""

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
            bounces = pending.bounces + 1
            if bounces == 1 and msg.t > pending.t and not pending.movable:
                # The server had jumped past our T, which it cannot move: it answered with
                # its floor, and a new request at that floor is likely served. No pause: we
                # served what waited for us first (_settle), so no cycle of waits re-forms.
                ready = now
            else:
                rtt = self._timer.srtt() or self._backoff
                ready = now + backoff_delay(bounces, rtt, self._rng)
            self._owe_again(Activation(msg.edge, ready, msg.t, bounces, due=pending.due))
        else:
            self.counters.failed += 1
        self._settle(state, pending, now)

    def _withdraw(self, pending: Pending, now: float) -> None:
        """Drop our request ``pending``, unanswered: we served a crossing request of its
        server's, and it cannot move (:mod:`gossip.crossing`, step 3). Its activation starts
        again at once, first: with our values after that jump."""
        _, action = INITIATOR_TRANSITIONS[(pending.phase, Event.WITHDRAW)]
        assert action is Action.RESTART
        self.counters.withdrawn += 1
        self._owe_again(Activation(pending.edge, bounces=pending.bounces, due=pending.due))
        self._settle(self._edges[pending.edge], pending, now)

    def _owe_again(self, activation: Activation) -> None:
        if self.initiating and self.open:
            self._waiting.add_first(activation)
        else:
            self.counters.skipped += 1

    def _settle(self, state: EdgeState, pending: Pending, now: float) -> None:
        del state.pending[pending.seq]
        self._in_flight -= 1
        if pending.retries >= STUCK_RETRIES:
            state.stuck -= 1
        self._disengage(pending, now)

    def _apply_reply(self, state: EdgeState, pending: Pending, msg: Reply, now: float) -> None:
        self._check_dim("dx", msg.dx)
        t = msg.t
        if t != pending.t and not (pending.movable and t > pending.t):
            valid = f">= {pending.t!r}" if pending.movable else f"{pending.t!r}"
            raise ProtocolError(
                f"reply to exchange {msg.seq} on edge {msg.edge} has t={t!r}; valid: {valid} "
                "(the request's time, or later if it let the server move it)"
            )
        if t > pending.t:
            self._check_time(t, now)  # moved: not absurdly far ahead of us
        if t < self._view_start:  # of the previous view (gossip.membership.Switch)
            if t < self._old_start:
                raise ProtocolError(
                    f"reply to exchange {msg.seq} on edge {msg.edge} at t={t!r} is two "
                    "membership views old; not applied"
                )
            dx, dz = mix_values(msg.dx, msg.dz, self._old_eta, self._view_start - t)
            self.ledger.add_values(msg.edge, dx, dz, self._view_start)
            remember_applied(state, msg.seq, None)  # of the old view: nothing catches up past it
        else:
            self._book_jump(msg.edge, msg.dx, msg.dz, t)
            remember_applied(state, msg.seq, (t, msg.dx, msg.dz))
        self._last = max(self._last, t)
        state.activations += 1
        if pending.due == pending.due:  # not NaN: the tick's time is known
            self._lags.add(t - pending.due)
            self._waits.add(self.timebase.t(pending.first_sent) - pending.due)
        self._timer.sample(now - pending.first_sent, retried=pending.phase is not Phase.SENT)
