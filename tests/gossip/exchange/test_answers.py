"""The answers part alone (gossip.exchange.answers), on an initiator with no server: a reply applied
at its time, a Busy's pause, a Nack given up, a repeat ignored, a withdrawn request redone."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from _parts import Freed, answers, initiator, shared

from continuized.gossip.errors import ProtocolError
from continuized.gossip.exchange.answers import Answers
from continuized.gossip.exchange.initiating import ExchangeValue, Initiator
from continuized.gossip.exchange.rto import RetryTimer
from continuized.gossip.exchange.switching import Views
from continuized.gossip.exchange.vocabulary import Event, ExchangeState, Link
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.model.mixing import mix_values
from continuized.gossip.wire.schema import Busy, Nack, Reply, Request, decode


@dataclass
class Started:
    """Node 0 with a request of its own in flight, rung at t = 1.5, sent at now = 101 (t = 2)."""

    state: ExchangeState
    starter: Initiator
    part: Answers
    views: Views
    request: Request
    freed: Freed


def started(value: ExchangeValue | None = None, timer: RetryTimer | None = None) -> Started:
    state, freed = shared(), Freed()
    timer = timer if timer is not None else RetryTimer(1.0, 0.01, 2.0)
    starter = initiator(state, value=value, freed=freed, timer=timer)
    views = Views(state)
    part = answers(state, starter, timer, views)
    out = starter.initiate(0, now=101.0, due=1.5)
    assert out is not None
    request = decode(out.frame)
    assert isinstance(request, Request)
    return Started(state, starter, part, views, request, freed)


def test_a_reply_is_applied_at_its_time_once_and_frees_the_lock() -> None:
    timer = RetryTimer(1.0, 0.01, 2.0)
    run = started(timer=timer)
    reply = Reply(src=1, edge=0, seq=run.request.seq, t=run.request.t, dx=(-0.25,), dz=(0.5,))
    before = run.state.ledger.state_values(1.5)  # T: the tick's time
    run.part.on_answer(reply, Event.REPLY, now=101.6)
    x, z = run.state.ledger.state_values(1.5)
    assert (x[0] - before[0][0], z[0] - before[1][0]) == pytest.approx((-0.25, 0.5))
    assert (run.state.last, run.starter.pending, run.starter.engaged, run.freed.times) == (
        1.5,
        0,
        None,
        [101.6],
    )
    assert run.state.edges[0].activations == 1
    assert run.part.lag()["p50"] == 0.0  # jumped when it rang, at 1.5
    assert run.part.wait()["p50"] == pytest.approx(0.5)  # started at t = 2.0
    assert timer.srtt() == pytest.approx(0.6)  # its round trip
    run.part.on_answer(reply, Event.REPLY, now=101.7)  # a repeat: not applied again
    assert run.state.counters.duplicates == 1
    assert run.state.ledger.state_values(1.5) == (x, z)


def test_a_reply_at_another_time_than_asked_is_rejected_unless_the_jump_could_move() -> None:
    run = started()
    assert run.request.z is not None  # movable: a's u is its x and it sent its z
    for t in (1.0, 1e9):  # earlier than asked; absurdly far ahead (beyond the max skew)
        bad = Reply(src=1, edge=0, seq=run.request.seq, t=t, dx=(0.1,), dz=(0.1,))
        with pytest.raises(ProtocolError):
            run.part.on_answer(bad, Event.REPLY, now=101.6)
        assert run.starter.pending == 1
    later = Reply(src=1, edge=0, seq=run.request.seq, t=3.5, dx=(0.1,), dz=(0.2,))
    run.part.on_answer(later, Event.REPLY, now=101.7)
    assert (run.starter.pending, run.state.last) == (0, 3.5)  # applied at the server's time
    # An exchanged g(x) cannot be mixed by the server: a reply that moved it is rejected.
    run = started(value=lambda x: 2.0 * x)
    fixed = run.request
    assert fixed.z is None
    moved = Reply(src=1, edge=0, seq=fixed.seq, t=3.5, dx=(0.1,), dz=(0.2,))
    with pytest.raises(ProtocolError, match=re.escape("valid: 1.5 (")):
        run.part.on_answer(moved, Event.REPLY, now=101.6)
    assert run.starter.pending == 1


def test_a_busy_owes_the_activation_again_after_a_pause_at_the_refusals_floor() -> None:
    run = started()
    run.part.on_answer(Busy(src=1, edge=0, seq=run.request.seq, t=4.0), Event.BUSY, now=101.2)
    assert (run.state.counters.bounced, run.starter.pending, run.starter.waiting) == (1, 0, 1)
    assert run.freed.times == [101.2]
    ready = run.starter.next_start()
    assert ready is not None
    assert 101.2 + 0.0005 <= ready <= 101.2 + 0.0015  # backoff 1 ms: no round trip yet
    (again,) = run.starter.expire(now=ready)
    retry = decode(again.frame)
    assert isinstance(retry, Request)
    assert (retry.seq, retry.t) == (2, 4.0)  # a new request, at least at the floor


def test_a_first_refusal_past_an_unmovable_requests_time_is_tried_again_at_once() -> None:
    run = started(value=lambda x: x)
    run.part.on_answer(Busy(src=1, edge=0, seq=run.request.seq, t=4.0), Event.BUSY, now=101.2)
    (again,) = run.starter.take_outgoing()  # no pause: started by the settling itself
    retry = decode(again.frame)
    assert isinstance(retry, Request)
    assert retry.t == 4.0
    assert run.starter.engaged is not None
    assert run.starter.engaged.bounces == 1
    run.part.on_answer(Busy(src=1, edge=0, seq=retry.seq, t=5.0), Event.BUSY, now=101.3)
    assert run.starter.take_outgoing() == []  # the second refusal pauses
    assert run.starter.waiting == 1


def test_a_nack_gives_the_exchange_up_and_changes_nothing() -> None:
    run = started()
    before = run.state.ledger.state_values(3.0)
    run.part.on_answer(
        Nack(src=1, edge=0, seq=run.request.seq, reason="closed"), Event.NACK, now=101.2
    )
    assert (run.state.counters.failed, run.starter.pending, run.starter.waiting) == (1, 0, 0)
    assert run.state.ledger.state_values(3.0) == before


def test_an_answer_to_a_request_never_sent_or_from_another_node_is_an_error() -> None:
    run = started()
    with pytest.raises(ProtocolError, match="never sent"):
        run.part.on_answer(
            Busy(src=1, edge=0, seq=run.request.seq + 1, t=2.0), Event.BUSY, now=101.1
        )
    with pytest.raises(ProtocolError, match="edge 0 from node 5"):
        run.part.on_answer(Busy(src=5, edge=0, seq=run.request.seq, t=2.0), Event.BUSY, now=101.1)


def test_a_withdrawn_request_is_settled_unanswered_and_started_again_first() -> None:
    run = started()
    pending = run.starter.engaged
    assert pending is not None
    run.starter.initiate(0, now=101.05)  # an owed tick, behind it
    run.part.withdraw(pending, now=101.1)
    assert run.state.counters.withdrawn == 1
    assert run.freed.times == [101.1]
    (again,) = run.starter.take_outgoing()  # at once, before the owed tick
    retry = decode(again.frame)
    assert isinstance(retry, Request)
    assert (retry.seq, retry.t) == (2, 1.5)  # the withdrawn one's tick
    assert run.starter.waiting == 1


def test_a_late_reply_of_the_previous_view_is_booked_at_the_new_views_start() -> None:
    run = started()
    run.views.switch(Ledger([1.0], [0], eta=0.2, t0=3.0), [Link(0, 1, 1.0)], start=3.0)
    reply = Reply(src=1, edge=0, seq=run.request.seq, t=run.request.t, dx=(0.25,), dz=(0.0,))
    run.part.on_answer(reply, Event.REPLY, now=101.6)
    x, z = run.state.ledger.state_values(3.0)
    dx, dz = mix_values([0.25], [0.0], 0.1, 3.0 - run.request.t)  # in the old view's eta
    assert (x[0], z[0]) == pytest.approx((1.0 + dx[0], 1.0 + dz[0]))
    assert run.state.last == 3.0
