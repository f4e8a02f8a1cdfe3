"""A restarted node on a new address: its ``Moved`` announcement, as the exchanger sees it.

Sans IO: a recovering exchanger and its neighbours, frames handed over by the test. The address
is only a route: a ``Moved`` never changes a ledger, a counter of exchanges or a sequence
number, and only the node at the other end of the named edge may send one.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.gossip.errors import ProtocolError
from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.recovery import check_moved
from continuized.gossip.exchange.vocabulary import Link, TimeBase
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.wire.schema import LedgerReply, LedgerRequest, Moved, decode, encode

ADDRESS = "tcp://127.0.0.1:41000"


def line3(recover_middle: bool = False) -> dict[int, Exchanger]:
    """Exchangers of line:3 (edges 0 = {0, 1}, 1 = {1, 2}); node 1 may be recovering."""
    links = {0: [Link(0, 1, 0.5)], 1: [Link(0, 0, 0.5), Link(1, 2, 0.5)], 2: [Link(1, 1, 0.5)]}
    tb = TimeBase(epoch=0.0, rate=1.0)
    return {
        v: Exchanger(
            v,
            ls,
            Ledger([float(v)], [link.edge for link in ls], eta=0.1),
            0.2,
            tb,
            recover=recover_middle and v == 1,
        )
        for v, ls in links.items()
    }


def test_a_recovering_node_announces_its_address_before_each_ledger_request() -> None:
    node = line3(recover_middle=True)[1]
    frames = [(out.peer, decode(out.frame)) for out in node.recovery.ledger_requests(ADDRESS)]
    assert frames == [
        (0, Moved(src=1, edge=0, address=ADDRESS)),
        (0, LedgerRequest(src=1, edge=0)),
        (2, Moved(src=1, edge=1, address=ADDRESS)),
        (2, LedgerRequest(src=1, edge=1)),
    ]
    # Without an address (a transport that has none to give) only the requests go.
    assert [type(decode(o.frame)) for o in node.recovery.ledger_requests()] == [LedgerRequest] * 2


def test_a_neighbour_learns_the_address_and_recovery_is_unchanged() -> None:
    nodes = line3(recover_middle=True)
    fresh = nodes[1]
    before = {v: nodes[v].ledger.state(5.0) for v in (0, 2)}
    for out in fresh.recovery.ledger_requests(ADDRESS):
        answer = nodes[out.peer].receive(out.frame, now=5.0, route=b"r1")
        if answer is not None:
            assert isinstance(decode(answer), LedgerReply)
            assert fresh.receive(answer, now=5.0) is None
    assert not fresh.recovering
    for v in (0, 2):
        assert nodes[v].recovery.take_moved() == {1: ADDRESS}
        assert nodes[v].recovery.take_moved() == {}  # handed out once
        np.testing.assert_array_equal(nodes[v].ledger.state(5.0), before[v])
        assert nodes[v].counters.rejected == 0
        assert nodes[v].activations() == {1: 0}


def test_it_announces_again_until_each_neighbours_requests_reach_it() -> None:
    nodes = line3(recover_middle=True)
    fresh = nodes[1]
    assert not nodes[0].recovery.announcing  # started normally: nobody knows an older address
    for out in fresh.recovery.ledger_requests(ADDRESS):
        if isinstance(decode(out.frame), Moved):
            continue  # every Moved lost, every LedgerRequest answered
        answer = nodes[out.peer].receive(out.frame, now=5.0, route=b"r1")
        assert answer is not None
        fresh.receive(answer, now=5.0)
    assert not fresh.recovering
    assert fresh.recovery.announcing
    assert [(o.peer, decode(o.frame)) for o in fresh.recovery.announcements(ADDRESS)] == [
        (0, Moved(src=1, edge=0, address=ADDRESS)),
        (2, Moved(src=1, edge=1, address=ADDRESS)),
    ]
    # Node 0's request reaches it (at its new address): node 0 needs no more telling.
    out = nodes[0].initiate(0, now=6.0)
    assert out is not None
    assert fresh.receive(out.frame, now=6.0, route=b"r0") is not None
    assert [o.peer for o in fresh.recovery.announcements(ADDRESS)] == [2]
    assert fresh.recovery.announcing


def moved(src: int = 1, edge: int = 0, address: str = ADDRESS) -> bytes:
    return encode(Moved(src=src, edge=edge, address=address))


@pytest.mark.parametrize(
    ("frame", "route", "sender", "counter"),
    [
        (moved(src=2), b"r", None, "rejected"),  # node 2 is not at the end of edge 0
        (moved(edge=1), b"r", None, "rejected"),  # edge 1 is not node 0's
        (moved(), None, None, "rejected"),  # as an answer, on a connection of ours
        (moved(address="tcp://0.0.0.0:41000"), b"r", None, "rejected"),  # a wildcard
        (moved(address="udp://127.0.0.1:41000"), b"r", None, "rejected"),
        (moved(address="tcp://127.0.0.1:0"), b"r", None, "rejected"),
        (moved(address="tcp://127.0.0.1"), b"r", None, "rejected"),
        (moved(address=ADDRESS + "\n"), b"r", None, "rejected"),
        (moved(address="mem://"), b"r", None, "rejected"),
        (moved(), b"r", 2, "forged"),  # the key says node 2, the frame says node 1
    ],
)
def test_a_moved_from_anyone_but_the_neighbour_changes_no_route(
    frame: bytes, route: bytes | None, sender: int | None, counter: str
) -> None:
    node = line3()[0]
    assert node.receive(frame, now=1.0, route=route, sender=sender) is None
    assert getattr(node.counters, counter) == 1
    assert node.recovery.take_moved() == {}


def test_the_authenticated_neighbour_may_move_its_edge() -> None:
    node = line3()[0]
    assert node.receive(moved(), now=1.0, route=b"r", sender=1) is None
    assert node.recovery.take_moved() == {1: ADDRESS}


@given(
    host=st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z0-9-]{1,10}){0,3}", fullmatch=True),
    port=st.integers(1, 65535),
)
def test_every_tcp_host_and_port_is_a_valid_address(host: str, port: int) -> None:
    address = f"tcp://{host}:{port}"
    assert check_moved(Moved(src=0, edge=0, address=address)) == address
    assert decode(moved(address=address)) == Moved(src=1, edge=0, address=address)


@given(port=st.one_of(st.integers(65536, 10**6), st.just(0)))
def test_a_port_out_of_range_is_refused_naming_the_address(port: int) -> None:
    with pytest.raises(ProtocolError, match=f"127.0.0.1:{port}"):
        check_moved(Moved(src=0, edge=0, address=f"tcp://127.0.0.1:{port}"))
