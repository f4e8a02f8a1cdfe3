"""The serving part alone (gossip.exchange.serving): requests built by hand, answered by a server
whose own initiator the test drives: served, cached, deferred, refused, Nacked, ignored."""

from __future__ import annotations

import pytest
from _parts import answers, initiator, shared

from continuized.gossip.errors import ConfigError, ProtocolError
from continuized.gossip.exchange.initiating import Initiator
from continuized.gossip.exchange.recovery import Recovery
from continuized.gossip.exchange.serving import DEFERRED, Server
from continuized.gossip.exchange.vocabulary import ExchangeState
from continuized.gossip.wire.schema import Busy, Nack, Reply, Request, decode


def server(
    peers: tuple[int, ...] = (0,), wait_limit: float | None = None, recover: bool = False
) -> tuple[ExchangeState, Server, Initiator]:
    """Node 1, with an edge k to each ``peers[k]``, as a server; its own initiator frees the
    lock into the server, as the exchanger wires them."""
    state = shared(node_id=1, peers=peers, value=0.0)
    recovery = Recovery(state, recover)
    parts: list[Server] = []
    starter = initiator(state, freed=lambda now: parts[0].serve_deferred(now))  # as wired
    part = Server(state, starter, answers(state, starter), recovery, c=0.5, wait_limit=wait_limit)
    parts.append(part)
    return state, part, starter


def ask(seq: int = 1, t: float = 2.0, src: int = 0, edge: int = 0, ack: int = 0) -> Request:
    return Request(src=src, edge=edge, seq=seq, ack=ack, t=t, u=(1.0,), z=(1.0,))


def test_a_free_server_applies_minus_the_flow_at_t_and_caches_the_reply() -> None:
    state, part, _ = server()
    answer = part.on_request(ask(), now=101.0, route=b"0")
    reply = decode(answer or b"")
    assert isinstance(reply, Reply)
    assert reply.t == 2.0
    assert reply.dx == pytest.approx((-0.5,))  # half the gap, into node 0
    x, _ = state.ledger.state_values(2.0)
    assert x[0] == pytest.approx(0.5)  # the average, at the exchange's time
    assert (state.last, state.counters.served, state.edges[0].activations) == (2.0, 1, 1)
    assert part.on_request(ask(), now=101.5, route=b"0") == answer  # a repeat: cached
    assert (state.counters.served, state.counters.duplicates) == (1, 1)


def test_a_forgotten_old_request_is_ignored() -> None:
    state, part, _ = server()
    part.on_request(ask(seq=1), now=101.0, route=b"0")
    part.on_request(ask(seq=2, ack=1, t=4.0), now=102.0, route=b"0")  # ack=1: 1 forgotten
    assert 1 not in state.edges[0].cache
    assert part.on_request(ask(seq=1), now=103.0, route=b"0") is None
    assert (state.counters.served, state.counters.duplicates) == (2, 1)


def test_a_movable_request_older_than_our_last_jump_is_served_there_else_refused() -> None:
    state, part, _ = server()
    state.last = 3.0
    reply = decode(part.on_request(ask(t=2.0), now=101.0, route=b"0") or b"")
    assert isinstance(reply, Reply)
    assert reply.t == 3.0  # moved to L: postponed, not refused
    assert state.counters.postponed == 1
    fixed = Request(src=0, edge=0, seq=2, ack=1, t=2.5, u=(1.0,))  # no z: cannot move
    busy = decode(part.on_request(fixed, now=101.0, route=b"0") or b"")
    assert isinstance(busy, Busy)
    assert busy.t == 3.0  # the earliest T we could accept
    assert state.counters.refused == 1


def test_a_request_waits_while_we_are_engaged_and_is_served_when_we_are_free() -> None:
    state, part, starter = server(peers=(0, 2))
    mine = starter.initiate(1, now=101.0)  # our own exchange, with node 2
    assert mine is not None
    assert part.on_request(ask(t=2.5), now=101.1, route=b"0") == DEFERRED
    assert part.on_request(ask(t=2.5), now=101.2, route=b"0") is None  # a repeat: waits too
    assert (state.counters.deferred, state.counters.duplicates) == (1, 1)
    assert part.next_limit() == pytest.approx(102.1)  # the first timeout (1 s)
    pending = starter.engaged
    assert pending is not None
    starter.settle(state.edges[1], pending, now=101.3)  # our exchange settles
    ((route, answer),) = part.take_released()
    assert route == b"0"
    assert isinstance(decode(answer), Reply)
    assert part.take_released() == []


def test_a_request_that_waited_its_limit_is_refused_and_a_repeat_gets_the_same_busy() -> None:
    state, part, starter = server(peers=(0, 2), wait_limit=0.5)
    assert starter.initiate(1, now=101.0) is not None
    assert part.on_request(ask(t=2.5), now=101.1, route=b"0") == DEFERRED
    part.expire(now=101.5)
    assert part.take_released() == []
    part.expire(now=101.6)
    ((route, answer),) = part.take_released()
    assert (route, type(decode(answer))) == (b"0", Busy)
    assert (state.counters.overdue, state.counters.refused) == (1, 1)
    assert part.on_request(ask(t=2.5), now=101.7, route=b"0") == answer


def test_a_closed_or_recovering_server_nacks_with_its_reason() -> None:
    for recover, why in ((True, "recovering"), (False, "closed")):
        state, part, _ = server(recover=recover)
        state.open = recover  # the recovering one is open
        nack = decode(part.on_request(ask(), now=101.0, route=b"0") or b"")
        assert isinstance(nack, Nack)
        assert nack.reason == why
        assert state.ledger.state_values(2.0) == ([0.0], [0.0])


def test_a_request_of_the_next_view_is_refused() -> None:
    state, part, _ = server()
    state.horizon = 2.0
    assert isinstance(decode(part.on_request(ask(t=2.0), 101.0, b"0") or b""), Busy)


@pytest.mark.parametrize(
    ("request_", "why"),
    [
        (ask(src=5), "edge 0 from node 5"),
        (Request(src=0, edge=0, seq=1, ack=0, t=2.0, u=(1.0, 2.0)), "components"),
        (ask(seq=2000), "valid: ack < seq"),
        (ask(t=1e9), "ahead of our time"),
        (ask(t=-1e6), "behind our time"),
    ],
)
def test_a_bad_request_raises_by_name_and_changes_nothing(request_: Request, why: str) -> None:
    state, part, _ = server()
    with pytest.raises(ProtocolError, match=why):
        part.on_request(request_, now=101.0, route=b"0")
    assert (state.edges[0].cache, state.counters.served) == ({}, 0)


def test_a_bad_wait_limit_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="wait_limit must be > 0 seconds or None, got 0"):
        server(wait_limit=0.0)
