"""The initiating part alone (gossip.exchange.initiating): the lock, the owed ticks, the jump time,
the retries and the release of a stuck exchange; no server, no answers."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from _parts import Freed, initiator, shared

from continuized.gossip.errors import ConfigError, LocalError
from continuized.gossip.exchange.initiating import Initiator
from continuized.gossip.exchange.rto import RetryTimer
from continuized.gossip.exchange.vocabulary import STUCK_RETRIES, Phase
from continuized.gossip.exchange.waiting import Activation
from continuized.gossip.wire.schema import Request, decode


def request_of(frame: bytes) -> Request:
    msg = decode(frame)
    assert isinstance(msg, Request)
    return msg


def test_a_free_node_starts_at_the_ticks_time_with_its_values_and_takes_the_lock() -> None:
    state = shared(value=0.75)
    starter = initiator(state)
    out = starter.initiate(0, now=101.0, due=1.5)  # rang at t = 1.5, started at t = 2
    assert out is not None
    assert out.peer == 1
    request = request_of(out.frame)
    x, z = state.ledger.state_values(1.5)
    assert (request.seq, request.ack, request.t, request.u, request.z) == (
        1,
        0,
        1.5,
        tuple(x),
        tuple(z),
    )
    assert starter.engaged is not None
    assert starter.engaged.frame == out.frame
    assert (starter.pending, state.counters.initiated) == (1, 1)


def test_the_jump_time_is_never_before_the_last_jump_nor_half_the_skew_back() -> None:
    state = shared()
    state.last = 3.0
    out = initiator(state).initiate(0, now=101.0, due=1.0)  # L is later than the tick
    assert out is not None
    assert request_of(out.frame).t == 3.0
    state = shared()
    out = initiator(state).initiate(0, now=200.0, due=1.0)  # t = 200; skew 60 (units of t)
    assert out is not None
    assert request_of(out.frame).t == pytest.approx(200.0 - 30.0)


def test_a_tick_while_engaged_waits_and_starts_when_settled_after_the_server_part() -> None:
    state, freed = shared(), Freed()
    starter = initiator(state, freed=freed)
    first = starter.initiate(0, now=101.0)
    assert first is not None
    assert starter.initiate(0, now=101.1) is None  # waits: late, not dropped
    assert (state.counters.waited, state.counters.skipped, starter.waiting) == (1, 0, 1)
    pending = starter.engaged
    assert pending is not None
    starter.settle(state.edges[0], pending, now=101.3)
    assert freed.times == [101.3]  # the server's waiting requests go first
    (started,) = starter.take_outgoing()  # then the owed tick
    assert request_of(started.frame).seq == 2
    assert request_of(started.frame).t == pytest.approx(2.6)  # 2 * (101.3 - 100)
    assert (starter.pending, starter.waiting, starter.engaged is not None) == (1, 0, True)


def test_an_activation_owed_again_starts_first_after_its_pause() -> None:
    state = shared(peers=(1, 2))
    starter = initiator(state)
    first = starter.initiate(0, now=101.0)
    assert first is not None
    assert starter.initiate(1, now=101.1) is None
    pending = starter.engaged
    assert pending is not None
    starter.owe_again(Activation(0, ready=102.0, not_before=5.0, bounces=1))
    starter.settle(state.edges[0], pending, now=101.2)
    assert starter.take_outgoing() == []  # the refused one pauses, and the node with it
    assert starter.next_start() == 102.0
    (out,) = starter.expire(now=102.0)
    request = request_of(out.frame)
    assert (request.edge, request.t) == (0, 5.0)  # first, at the refusal's floor
    assert starter.engaged is not None
    assert starter.engaged.bounces == 1


def test_timeouts_resend_the_same_frame_and_a_stuck_exchange_releases_the_lock() -> None:
    state, freed = shared(), Freed()
    starter = initiator(state, timeout=0.5, freed=freed)
    out = starter.initiate(0, now=101.0)
    assert out is not None
    assert starter.next_deadline() == pytest.approx(101.5)
    assert starter.expire(now=101.4) == []
    retries = starter.expire(now=101.5)
    assert [r.frame for r in retries] == [out.frame]  # same seq, same T, same value
    assert starter.next_deadline() == pytest.approx(102.5)  # doubled
    pending = starter.engaged
    assert pending is not None
    assert pending.phase is Phase.RETRYING
    assert starter.initiate(0, now=101.6) is None  # engaged: the tick waits
    now = 102.5
    for _ in range(STUCK_RETRIES - 2):
        starter.expire(now=now)
        now += 2.0  # the timeout doubles up to max_timeout (2 s)
    assert starter.engaged is pending
    starter.expire(now=now)  # the last retry: stuck; the node is released, the tick dropped
    assert starter.engaged is None
    assert freed.times == [now]
    counters = state.counters
    assert (counters.retried, counters.released, counters.skipped) == (STUCK_RETRIES, 1, 1)
    assert state.edges[0].stuck == 1
    assert starter.initiate(0, now=now + 0.1) is None  # the edge is stuck: skipped
    assert counters.skipped == 2
    starter.settle(state.edges[0], pending, now=now + 0.4)  # its answer came at last
    assert (starter.pending, state.edges[0].stuck) == (0, 0)
    assert starter.initiate(0, now=now + 0.5) is not None  # no longer stuck


def test_a_peer_silent_for_every_stuck_retries_retries_is_named_for_the_shell() -> None:
    starter = initiator(shared(), timeout=0.5)
    assert starter.initiate(0, now=101.0) is not None
    named = []
    for _ in range(3 * STUCK_RETRIES):
        deadline = starter.next_deadline()
        assert deadline is not None
        starter.expire(now=deadline)
        named.append(starter.take_silent())
    # Named once per STUCK_RETRIES retries without an answer, and taken once.
    assert [k + 1 for k, s in enumerate(named) if s] == [
        STUCK_RETRIES,
        2 * STUCK_RETRIES,
        3 * STUCK_RETRIES,
    ]
    assert all(s == {1} for s in named if s)
    assert starter.take_silent() == set()


def test_the_first_timeout_follows_the_timer() -> None:
    timer = RetryTimer(0.5, 0.01, 2.0)
    starter = initiator(shared(), timer=timer)
    assert starter.current_timeout() == 0.5
    for _ in range(20):
        timer.sample(0.002, retried=False)
    assert starter.current_timeout() == pytest.approx(0.01)  # 2 ms round trips: the floor
    assert starter.initiate(0, now=130.0) is not None
    assert starter.next_deadline() == pytest.approx(130.01)


def test_nothing_starts_while_recovering_closed_stopping_or_past_the_horizon() -> None:
    for block in ("unrecovered", "open", "horizon"):
        state = shared()
        if block == "unrecovered":
            state.unrecovered = 1
        elif block == "open":
            state.open = False
        else:
            state.horizon = 1.0  # the tick's T = 2 belongs to the next view
        starter = initiator(state)
        assert starter.initiate(0, now=101.0) is None, block
        assert (state.counters.skipped, starter.pending) == (1, 0), block
    state = shared()
    starter = initiator(state)
    assert starter.initiate(0, now=101.0) is not None
    starter.initiate(0, now=101.1)
    assert starter.stop_initiating() == 1  # the owed tick is dropped
    assert (starter.initiating, starter.waiting, state.counters.skipped) == (False, 0, 1)
    starter.owe_again(Activation(0))  # a refusal while stopping: not owed
    assert (starter.waiting, state.counters.skipped) == (0, 2)


def test_without_the_lock_max_in_flight_bounds_the_pending_requests_per_edge() -> None:
    state = shared(exclusive=False)
    starter = initiator(state, max_in_flight=2)
    outs = [starter.initiate(0, now=101.0 + k / 10) for k in range(3)]
    assert [out is not None for out in outs] == [True, True, False]
    assert (starter.pending, starter.engaged, state.counters.skipped) == (2, None, 1)
    assert all(request_of(out.frame).z is None for out in outs if out is not None)  # can't move


def test_abandon_all_gives_up_everything_pending_and_counts_it_failed() -> None:
    state = shared()
    starter = initiator(state)
    assert starter.initiate(0, now=101.0) is not None
    starter.initiate(0, now=101.1)
    assert starter.abandon_all() == 1
    assert (starter.pending, starter.engaged, starter.waiting) == (0, None, 0)
    assert (state.edges[0].pending, state.counters.failed) == ({}, 1)
    assert starter.next_deadline() is None


def test_bad_settings_are_refused_by_name() -> None:
    state = shared()
    with pytest.raises(ConfigError, match=re.escape("timeout=3.0, max_timeout=2.0")):
        initiator(state, timeout=3.0)
    with pytest.raises(ConfigError, match="max_in_flight must be >= 1 or None, got 0"):
        initiator(state, max_in_flight=0)


def _exchanging(value: object, dim: int = 3) -> Initiator:
    from continuized.gossip.model.ledger import Ledger

    state = shared()
    state.ledger = Ledger([0.5] * dim, [0], eta=0.01)
    return initiator(state, value=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (lambda y: y * 2.0, 1.0),  # an array (the node's x is 0.5 throughout)
        (lambda y: (y * 2.0).tolist(), 1.0),  # a list of floats
        (lambda y: [int(v) * 0 + 3 for v in y], 3.0),  # a list of ints: sent as floats
        (lambda y: (y * 2.0).astype(np.float32), 1.0),  # another dtype
        (lambda y: [y.tolist()], 0.5),  # one row of d: flattened
    ],
)
def test_an_exchanged_value_is_d_plain_floats(answer: object, expected: float) -> None:
    u = _exchanging(answer).exchanged(1.0)
    assert u == [expected] * 3
    assert all(type(v) is float for v in u)


@pytest.mark.parametrize(
    ("answer", "shown"),
    [
        (lambda y: [1.0, float("nan"), 2.0], "nan"),
        (lambda y: [1.0, 2.0], r"\[1.0, 2.0\]"),
        (lambda y: np.full(3, np.inf), "inf"),
    ],
)
def test_a_bad_exchanged_value_is_refused_by_name(answer: object, shown: str) -> None:
    with pytest.raises(LocalError, match=f"exchange_value returned .*{shown}.*3 finite"):
        _exchanging(answer).exchanged(1.0)


def test_finite_values_whose_sum_overflows_are_sent() -> None:
    u = _exchanging(lambda y: [1e308, 1e308, -1.0]).exchanged(1.0)
    assert u == [1e308, 1e308, -1.0]
    assert not math.isinf(u[0])
