"""Recovery alone (gossip.exchange.recovery): a restarted node's ledger requests and announcements,
its ledger rebuilt from the neighbours' replies, and the neighbours' new addresses."""

from __future__ import annotations

import pytest
from _parts import shared

from continuized.gossip.errors import ProtocolError
from continuized.gossip.exchange.recovery import Recovery, ledger_reply
from continuized.gossip.wire.schema import LedgerReply, LedgerRequest, Moved, decode

ADDRESS = "tcp://10.0.0.9:7100"


def test_a_restarted_node_asks_every_neighbour_announcing_its_address_until_heard() -> None:
    state = shared(peers=(1, 2))
    recovery = Recovery(state, recover=True)
    assert state.unrecovered == 2
    assert [e.recovered for e in state.edges.values()] == [False, False]
    sent = [(out.peer, type(decode(out.frame))) for out in recovery.ledger_requests(ADDRESS)]
    assert sent == [(1, Moved), (1, LedgerRequest), (2, Moved), (2, LedgerRequest)]
    assert recovery.announcing
    recovery.heard(0)  # a request of node 1's reached us: it sends where we are
    assert [out.peer for out in recovery.announcements(ADDRESS)] == [2]
    recovery.heard(1)
    assert not recovery.announcing
    assert recovery.announcements(ADDRESS) == []


def test_a_node_started_normally_has_nothing_to_recover_or_announce() -> None:
    state = shared()
    recovery = Recovery(state, recover=False)
    assert (state.unrecovered, recovery.announcing, recovery.ledger_requests(ADDRESS)) == (
        0,
        False,
        [],
    )


def test_the_ledger_is_set_to_minus_the_neighbours_and_numbered_after_it() -> None:
    neighbour = shared(node_id=1, peers=(0,), value=0.0)
    neighbour.ledger.add_values(0, [0.25], [0.5], 1.0)  # a jump it applied
    neighbour.edges[0].max_seen, neighbour.edges[0].next_seq = 6, 3
    answer = ledger_reply(1, neighbour.ledger, neighbour.edges[0], t=2.0)
    state = shared(value=0.0)
    recovery = Recovery(state, recover=True)
    recovery.on_ledger_reply(answer, now=101.0)
    mine, theirs = state.ledger.edge_total(0, 3.0), neighbour.ledger.edge_total(0, 3.0)
    assert mine.dx.tolist() == pytest.approx((-theirs.dx).tolist())
    assert mine.dz.tolist() == pytest.approx((-theirs.dz).tolist())
    assert (state.unrecovered, state.last, state.edges[0].next_seq) == (0, 2.0, 7)
    assert state.edges[0].max_seen == 2  # their settled exchanges: our values hold them
    recovery.on_ledger_reply(answer, now=101.0)  # a repeat: counted, not applied
    assert (state.counters.duplicates, state.unrecovered) == (1, 0)


def test_a_node_restarted_long_after_the_start_recovers_its_exact_state() -> None:
    """Its rows start at t = 0: a reply from t = 5,000 (2 eta t = 1,000, past exp's overflow)
    is taken once the rows follow our own clock, exactly."""
    t, now = 5000.0, 5000.0 / 2.0 + 100.0  # TIMEBASE: t = 2 (now - 100)
    neighbour = shared(node_id=1, peers=(0,), value=0.0)
    neighbour.ledger.state_values(t - 3.0)  # a running node reads its state: its rows follow
    neighbour.ledger.add_values(0, [0.25], [0.5], t - 3.0)
    state = shared(value=0.0)
    recovery = Recovery(state, recover=True)
    recovery.on_ledger_reply(ledger_reply(1, neighbour.ledger, neighbour.edges[0], t=t), now)
    assert state.unrecovered == 0
    mine = state.ledger.edge_total(0, t + 1.0)
    theirs = neighbour.ledger.edge_total(0, t + 1.0)
    assert mine.dx.tolist() == pytest.approx((-theirs.dx).tolist(), rel=1e-12)
    assert mine.dz.tolist() == pytest.approx((-theirs.dz).tolist(), rel=1e-12)


def test_a_bad_ledger_reply_raises_and_changes_nothing() -> None:
    state = shared()
    recovery = Recovery(state, recover=True)
    for bad, why in (
        (LedgerReply(src=1, edge=0, seq=1, t=2.0, fx=(1.0, 2.0), fz=(0.0, 0.0)), "components"),
        (LedgerReply(src=1, edge=0, seq=1, t=1e9, fx=(1.0,), fz=(0.0,)), "max skew"),
        (LedgerReply(src=2, edge=0, seq=1, t=2.0, fx=(1.0,), fz=(0.0,)), "from node 2"),
    ):
        with pytest.raises(ProtocolError, match=why):
            recovery.on_ledger_reply(bad, now=101.0)
    assert state.unrecovered == 1


def test_our_ledger_reply_is_taken_after_every_jump_of_ours() -> None:
    state = shared()
    state.last = 50.0  # ahead of now's t = 2
    answer = decode(Recovery(state, recover=False).on_ledger_request(LedgerRequest(1, 0), 101.0))
    assert isinstance(answer, LedgerReply)
    assert answer.t == 50.0


def test_a_neighbours_new_address_is_taken_once_from_a_request_only() -> None:
    state = shared()
    recovery = Recovery(state, recover=False)
    with pytest.raises(ProtocolError, match="as a request"):
        recovery.on_moved(Moved(src=1, edge=0, address=ADDRESS), route=None)
    with pytest.raises(ProtocolError, match="tcp://HOST:PORT"):
        recovery.on_moved(Moved(src=1, edge=0, address="tcp://0.0.0.0:1"), route=b"1")
    assert not recovery.moved
    recovery.on_moved(Moved(src=1, edge=0, address=ADDRESS), route=b"1")
    assert recovery.take_moved() == {1: ADDRESS}
    assert recovery.take_moved() == {}


def test_giving_up_recovery_marks_the_edges_recovered_as_they_are() -> None:
    state = shared(peers=(1, 2))
    recovery = Recovery(state, recover=True)
    assert recovery.give_up_recovery() == [0, 1]
    assert state.unrecovered == 0
    assert all(e.recovered for e in state.edges.values())
    assert recovery.give_up_recovery() == []
