"""The parting rule of gossip.exchange.parting, checked against a sequential replay of a stop.

Two exchangers on one edge, frames carried by hand: the reply of the last exchange is lost, both
nodes close, and the test plays what the daemons do after the final report (re-send what has
timed out, send goodbyes) until both have parted. The sums must then be exact, with no help from
a timer: whatever is lost, neither end parts while the other may still need its answer.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.gossip.errors import ProtocolError
from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.parting import Parting
from continuized.gossip.exchange.vocabulary import EdgeState, ExchangeState, Link, Pending, TimeBase
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.wire.schema import Done, Reply, decode, encode

_T = 50.0  # a common time after every jump: rate 2, Unix 125


def _pair() -> tuple[Exchanger, Exchanger]:
    timebase = TimeBase(epoch=100.0, rate=2.0)
    a, b = (
        Exchanger(
            v, [Link(0, 1 - v, 1.0)], Ledger([1.0 - v], [0], eta=0.1), 0.5, timebase, timeout=0.2
        )
        for v in (0, 1)
    )
    return a, b


def _total(a: Exchanger, b: Exchanger) -> float:
    return float(a.ledger.state(_T)[0][0] + b.ledger.state(_T)[0][0])


def test_a_server_whose_reply_was_lost_stays_until_the_initiator_is_done() -> None:
    a, b = _pair()
    out = a.initiate(0, now=101.0)
    assert out is not None
    reply = b.receive(out.frame, now=101.1)  # b applied its half; the reply is lost
    assert isinstance(decode(reply or b""), Reply)
    a.close()
    b.close()
    assert a.parting.goodbyes() == []  # a's exchange is pending: it is not done with b
    for goodbye in b.parting.goodbyes():
        assert a.receive(goodbye.frame, now=101.2, route=b"r") is None  # a: not done yet
    assert not b.parting.parted  # the exit of a timer-only stop: here b stays
    retry = a.expire(now=101.4)  # a re-sends the same frame; b's cache answers it
    assert [r.frame for r in retry] == [out.frame]
    a.receive(b.receive(retry[0].frame, now=101.5) or b"", now=101.6)
    assert a.pending == 0
    assert _total(a, b) == pytest.approx(1.0, abs=1e-15)
    (done,) = a.parting.goodbyes()
    assert decode(done.frame) == Done(src=0, edge=0, heard=1)  # b's Done came in meanwhile
    answer = b.receive(done.frame, now=101.7, route=b"r")
    assert decode(answer or b"") == Done(src=1, edge=0, heard=1)
    # a's Done said it heard b's, and that a is done: b may go; a waits for b's answer.
    assert b.parting.parted
    assert b.parting.goodbyes() == []
    assert not a.parting.parted
    a.receive(answer or b"", now=101.8)
    assert a.parting.parted
    assert a.parting.goodbyes() == []


def test_a_running_neighbour_answers_a_goodbye_only_with_nothing_of_its_own_pending() -> None:
    a, b = _pair()
    a.close()
    mine = b.initiate(0, now=101.0)  # b keeps running; its request reaches closed a
    assert mine is not None
    (done,) = a.parting.goodbyes()
    assert b.receive(done.frame, now=101.1, route=b"r") is None  # b has one pending on a
    b.receive(a.receive(mine.frame, now=101.2, route=b"r") or b"", now=101.3)  # a Nack
    assert (b.pending, b.counters.failed) == (0, 1)
    answer = b.receive(done.frame, now=101.4, route=b"r")
    assert decode(answer or b"") == Done(src=1, edge=0, heard=1)
    a.receive(answer or b"", now=101.5)
    assert a.parting.parted
    assert _total(a, b) == pytest.approx(1.0, abs=1e-15)


def test_open_nodes_send_no_goodbye_and_a_goodbye_from_a_stranger_is_rejected() -> None:
    a, _b = _pair()
    assert a.parting.goodbyes() == []
    assert not a.parting.parted
    a.close()
    assert a.receive(encode(Done(src=7, edge=0, heard=1)), now=101.0, route=b"r") is None
    assert a.counters.rejected == 1
    assert not a.parting.parted


@settings(max_examples=150, deadline=None)
@given(st.lists(st.booleans(), max_size=60), st.integers(1, 6))
def test_whatever_frames_are_lost_both_ends_part_with_exact_sums(
    lost: list[bool], exchanges: int
) -> None:
    """A lossy stop: ``lost[k]`` drops the k-th frame sent (after the list, none is lost)."""
    a, b = _pair()
    nodes = {0: a, 1: b}
    drops = iter(lost)
    inbox: list[tuple[int, bytes, bool]] = []  # (to, frame, as a request with a route)
    now = 101.0

    def send(to: int, frame: bytes, request: bool) -> None:
        if not next(drops, False):
            inbox.append((to, frame, request))

    def deliver() -> None:
        while inbox:
            to, frame, request = inbox.pop(0)
            node = nodes[to]
            answer = node.receive(frame, now, route=b"r" if request else None)
            if answer:
                send(1 - to, answer, False)
            for out in node.take_outgoing():  # a waiting tick started once the lock freed
                send(out.peer, out.frame, True)
            for _route, released in node.take_released():  # deferred requests' answers
                send(1 - to, released, False)

    for k in range(exchanges):  # exchanges both ways, some of them cut short
        out = nodes[k % 2].initiate(0, now=now)
        if out is not None:
            send(out.peer, out.frame, True)
        now += 0.01
        deliver()
    for v in (0, 1):
        nodes[v].close()
        for _route, released in nodes[v].take_released():  # what waited: Nacked at close
            send(1 - v, released, False)
    for _ in range(400):  # the daemons' loop after the final report: retries and goodbyes
        if a.parting.parted and b.parting.parted:
            break
        now += 0.1
        for node in nodes.values():
            for out in [*node.expire(now), *node.parting.goodbyes()]:
                send(out.peer, out.frame, True)
        deliver()
    assert a.parting.parted
    assert b.parting.parted
    assert a.pending == b.pending == 0
    assert _total(a, b) == pytest.approx(1.0, abs=1e-14)
    np.testing.assert_allclose(a.ledger.state(_T)[1] + b.ledger.state(_T)[1], 1.0, atol=1e-14)


# --- the Parting part alone (no exchanger): its Dones, from a shared state the test sets ---


def test_a_closed_node_says_done_on_each_edge_with_nothing_of_its_own_pending() -> None:
    state = _shared(peers=(1, 2))
    parting = Parting(state)
    assert parting.goodbyes() == []  # open
    state.open = False
    state.edges[1].pending[1] = Pending(1, 1, 2, b"", 1.0, 100.0, 1.0, 101.0)
    (goodbye,) = parting.goodbyes()  # not on edge 1: an exchange of ours is pending there
    assert (goodbye.peer, decode(goodbye.frame)) == (1, Done(0, 0, 0))
    parting.on_done(Done(1, 0, 0), route=b"1")
    (goodbye,) = parting.goodbyes()
    assert decode(goodbye.frame) == Done(0, 0, 1)  # and now: "I have had yours"
    assert not parting.parted


def test_a_done_is_answered_as_a_request_only_when_nothing_of_ours_is_pending() -> None:
    state = _shared()
    parting = Parting(state)  # open: a running node answers too
    assert decode(parting.on_done(Done(1, 0, 0), route=b"1") or b"") == Done(0, 0, 1)
    assert parting.on_done(Done(1, 0, 0), route=None) is None  # an answer: no answer to it
    state.edges[0].pending[1] = Pending(0, 1, 1, b"", 1.0, 100.0, 1.0, 101.0)
    assert parting.on_done(Done(1, 0, 0), route=b"1") is None  # ours first
    with pytest.raises(ProtocolError, match="edge 0 from node 3"):
        parting.on_done(Done(3, 0, 0), route=b"3")


def test_a_node_parts_once_every_neighbour_is_done_and_has_heard_it() -> None:
    state = _shared(peers=(1, 2))
    parting = Parting(state)
    state.open = False
    parting.on_done(Done(1, 0, 1), route=None)
    assert not parting.parted  # node 2 has said nothing
    parting.on_done(Done(2, 1, 0), route=b"2")
    assert not parting.parted  # node 2 has not heard ours
    parting.on_done(Done(2, 1, 1), route=None)
    assert parting.parted
    assert parting.goodbyes() == []


def _shared(peers: tuple[int, ...] = (1,)) -> ExchangeState:
    links = [Link(k, peer, 1.0) for k, peer in enumerate(peers)]
    ledger = Ledger([0.0], [link.edge for link in links], eta=0.1)
    edges = {link.edge: EdgeState(link) for link in links}
    return ExchangeState(0, TimeBase(100.0, 2.0), ledger, edges, 60.0, exclusive=True)
