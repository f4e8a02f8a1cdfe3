"""The serving part of a node's exchanges (step 2 of :mod:`gossip.exchange.exchanger`'s rule): where
the node stands when a request comes in, and what it does then, from
:data:`~gossip.exchange.vocabulary.SERVER_ACTIONS`: serve at ``T_s = max(T, L)`` (moved, caught up
or crossed where :mod:`gossip.exchange.crossing` says), make it wait for our own exchange
(:mod:`gossip.exchange.deferral`), refuse it with a Busy, or Nack it; every answer cached under
``(edge, seq)``, so that a repeat gets the same one.
"""

from __future__ import annotations

import math

import numpy as np

from continuized.gossip.errors import ConfigError, GossipError, ProtocolError
from continuized.gossip.exchange.answers import Answers
from continuized.gossip.exchange.crossing import (
    catchable,
    caught_up,
    crosses_pending,
    lacks_jump,
    standing_toward_peer,
)
from continuized.gossip.exchange.deferral import Deferred
from continuized.gossip.exchange.initiating import Initiator
from continuized.gossip.exchange.recovery import Recovery
from continuized.gossip.exchange.vocabulary import (
    SEQ_WINDOW,
    SERVER_ACTIONS,
    EdgeState,
    ExchangeState,
    Standing,
)
from continuized.gossip.model.mixing import Values, mix_values
from continuized.gossip.wire.checks import Vector
from continuized.gossip.wire.schema import Busy, Frame, Nack, Reply, Request, encode

__all__ = ["DEFERRED", "Server"]

DEFERRED = b""
"""What :meth:`Server.on_request` (and :meth:`gossip.exchange.exchanger.Exchanger.receive`) returns
for a request that waits for this node to be free: its answer comes later from
:meth:`Server.take_released`, with the route given."""


class Server:
    """One node, as the server of its neighbours' requests.

    Parameters
    ----------
    state : ExchangeState
        The node's shared state.
    initiator : Initiator
        The node's initiating part: its lock (``engaged``) decides whether a request waits.
    answers : Answers
        Withdraws our own request when we serve a crossing one that cannot move.
    recovery : Recovery
        Hears that a neighbour reaches us where we are (no more announcements to it).
    c : float
        Jump coupling of the second variable (``0`` for RG).
    wait_limit : float or None
        Longest a request waits for our exchange, in seconds, before it is refused; ``None``:
        the initiator's current first timeout.
    """

    def __init__(
        self,
        state: ExchangeState,
        initiator: Initiator,
        answers: Answers,
        recovery: Recovery,
        *,
        c: float,
        wait_limit: float | None,
    ):
        if wait_limit is not None and not wait_limit > 0:
            raise ConfigError(f"wait_limit must be > 0 seconds or None, got {wait_limit!r}")
        self._state = state
        self._initiator = initiator
        self._answers = answers
        self._recovery = recovery
        self.c = float(c)
        self.wait_limit = wait_limit
        self.deferred = Deferred()  # requests waiting for our exchange to settle
        self._released: list[tuple[bytes | None, Frame]] = []

    def take_released(self) -> list[tuple[bytes | None, Frame]]:
        """Return (and forget) the answers to deferred requests, with their routes."""
        out, self._released = self._released, []
        return out

    def next_limit(self) -> float | None:
        """Return the earliest limit of a waiting request (Unix seconds; ``None``: none)."""
        return self.deferred.next_limit()

    def _standing(self, msg: Request, state: EdgeState) -> Standing:
        shared = self._state
        if not shared.open or shared.unrecovered:
            return Standing.CLOSED
        if msg.t >= shared.horizon:  # of a membership view we have not switched to yet
            return Standing.BUSY
        if not shared.exclusive:
            return Standing.FREE
        if msg.t < shared.last and not self._movable(msg):
            return Standing.BUSY
        if lacks_jump(msg, state) and not catchable(
            msg, state, self._movable(msg), shared.view_start
        ):
            return Standing.BUSY  # it lacks jumps we cannot put back in: waiting cannot help
        engaged = self._initiator.engaged
        if engaged is not None and engaged.peer == msg.src:  # each asked the other
            standing = standing_toward_peer(msg, engaged, shared.node_id)
        elif crosses_pending(msg, state, shared.node_id, self._movable(msg)):
            return Standing.BUSY  # our lock was released: its sender may have withdrawn it
        elif engaged is None:
            standing = Standing.FREE
        elif msg.t < engaged.t and not self._movable(msg):
            return Standing.BUSY  # after our exchange L >= its T: waiting would end in a Busy
        else:
            return Standing.WAIT
        serve_now = standing is Standing.FREE or standing is Standing.CROSSING
        return Standing.BUSY if serve_now and self._served_at(msg) >= shared.horizon else standing

    def _movable(self, msg: Request) -> bool:
        # Within one membership view only: the old view's mixing and edges differ.
        return msg.z is not None and msg.t >= self._state.view_start

    def _served_at(self, msg: Request) -> float:
        """The time T_s at which a free server applies ``msg``: its own T, or our L if later and
        the request lets us move it (the initiator is engaged: it jumps nowhere until then)."""
        last = self._state.last
        if self._state.exclusive and msg.t < last and self._movable(msg):
            return last
        return msg.t

    def serve_deferred(self, now: float) -> None:
        """Decide every waiting request as a new one (the lock is free, or the node closed:
        ``now`` NaN); their answers go to :meth:`take_released`."""
        for waiter in self.deferred.take_all():
            try:
                answer = self.on_request(waiter.request, now, waiter.route)
            except GossipError:
                self._state.counters.rejected += 1
                continue
            if answer is not None and answer != DEFERRED:
                self._released.append((waiter.route, answer))

    def _refusal(self, msg: Request) -> Frame:
        """Count and return a Busy for ``msg``, with the earliest T we could accept: after our
        own exchange's, and our last jump (at least its own T: finite, although we may have
        no jump yet)."""
        engaged = self._initiator.engaged
        after = max(self._state.last, msg.t, -math.inf if engaged is None else engaged.t)
        self._state.counters.refused += 1
        return encode(Busy(src=self._state.node_id, edge=msg.edge, seq=msg.seq, t=after))

    def expire(self, now: float) -> None:
        """Refuse the requests that waited their limit: their Busy answers go to
        :meth:`take_released`."""
        for waiter in self.deferred.overdue(now):
            msg = waiter.request
            answer = self._refusal(msg)
            state = self._state.edges.get(msg.edge)
            if state is not None:  # a repeat gets the same refusal
                state.max_seen = max(state.max_seen, msg.seq)
                state.cache[msg.seq] = answer
            self._state.counters.overdue += 1
            self._released.append((waiter.route, answer))

    def on_request(self, msg: Request, now: float, route: bytes | None) -> Frame | None:
        """Decide a neighbour's request; return the answer (:data:`DEFERRED` if it waits,
        ``None`` if it is ignored).

        Raises
        ------
        ProtocolError
            The request is not acceptable (edge, dimension, numbering, time); nothing changes.
        """
        shared = self._state
        counters = shared.counters
        state = shared.edge_from(msg.src, msg.edge)
        self._recovery.heard(msg.edge)
        shared.check_dim("u", msg.u)
        if msg.z is not None:
            shared.check_dim("z", msg.z)
        if not msg.ack < msg.seq <= msg.ack + SEQ_WINDOW:
            # An honest initiator numbers at most SEQ_WINDOW ahead of its watermark: our bound.
            raise ProtocolError(
                f"request {msg.seq} on edge {msg.edge} has ack {msg.ack}; valid: ack < seq <= "
                f"ack + {SEQ_WINDOW}"
            )
        if not math.isnan(now):  # nan: answering what waited, while closing
            shared.check_time(msg.t, now)
        acked = state.ack_seen
        standing = self._standing(msg, state)
        action = SERVER_ACTIONS[(standing, state.lookup(msg.seq, msg.ack))]
        deferred = self.deferred
        if state.ack_seen > acked and deferred:
            # The initiator has settled every exchange numbered <= ack on this edge: those
            # still waiting here need no answer (and would otherwise pile up).
            counters.duplicates += deferred.forget(msg.edge, state.ack_seen)
        if action == "answer":
            counters.duplicates += 1
            return state.cache[msg.seq]
        if action == "ignore" or (msg.edge, msg.seq) in deferred:
            counters.duplicates += 1  # a repeat of one waiting: answered when it is
            return None
        if action == "defer":
            # At most about a round trip (our exchange's), unless the waits closed a cycle:
            # the limit breaks it (gossip.exchange.exchanger, "No deadlock").
            wait = self._initiator.current_timeout() if self.wait_limit is None else self.wait_limit
            deferred.add(msg, route, now + wait)
            counters.deferred += 1
            return DEFERRED
        if action == "nack":
            why = "recovering" if shared.unrecovered else "closed"
            answer = encode(Nack(src=shared.node_id, edge=msg.edge, seq=msg.seq, reason=why))
        elif action == "busy":
            answer = self._refusal(msg)
        else:
            answer = self._serve(msg, state, standing, now)
        state.max_seen = max(state.max_seen, msg.seq)
        state.cache[msg.seq] = answer
        engaged = self._initiator.engaged
        if standing is Standing.CROSSING and engaged is not None and not engaged.movable:
            self._answers.withdraw(engaged, now)  # gossip.exchange.crossing, step 3
        return answer

    def _serve(self, msg: Request, state: EdgeState, standing: Standing, now: float) -> Frame:
        """Apply ``-flow`` at T_s and return the Reply (step 2 of the rule)."""
        shared = self._state
        if shared.timebase.t(now) - msg.t > shared.max_skew_t:
            # Our state that far back would be mixed back by exp(+2 eta tau): overflow.
            # Only a clock off by more than the skew sends a new request so old.
            raise ProtocolError(
                f"field 't' = {msg.t!r} is behind our time {shared.timebase.t(now)!r} by "
                f"more than the max skew {shared.max_skew_t!r} (units of t)"
            )
        t = self._served_at(msg)
        u_v: Values = msg.u
        if shared.exclusive and lacks_jump(msg, state):  # it served ours after reading u
            u_v = caught_up(msg, state, shared.eta, t)
            shared.counters.caught_up += 1
        elif t != msg.t:  # moved: the initiator's (x, z) mixed from its T to ours
            assert msg.z is not None
            u_v = mix_values(msg.u, msg.z, shared.eta, t - msg.t)[0]
        shared.counters.postponed += t != msg.t
        shared.counters.crossed += standing is Standing.CROSSING
        # Into the initiator; gossip's u = x is computed inside the flow, never stored.
        if self._initiator.exchanges_x:
            dx, dz = shared.ledger.flow_at(u_v, t, self.c, state.link.step)
        else:
            u_w = self._initiator.exchanged(t)
            dx, dz = shared.ledger.flow_values(u_v, u_w, self.c, state.link.step)
        shared.book_jump(msg.edge, dx, dz, t, sign=-1.0)
        shared.last = max(shared.last, t)
        answer = encode(
            Reply(
                src=shared.node_id,
                edge=msg.edge,
                seq=msg.seq,
                t=t,
                dx=_vector(dx),
                dz=_vector(dz),
                wall=now,  # the initiator bounds our clocks' offset with it (clockskew)
            )
        )
        state.activations += 1
        shared.counters.served += 1
        if shared.first_wall is None:
            shared.first_wall = now
        return answer


def _vector(values: Values) -> Vector:
    """A flow as the wire carries it: an array stays one (a raw part), floats go as a tuple."""
    return values if isinstance(values, np.ndarray) else tuple(values)
