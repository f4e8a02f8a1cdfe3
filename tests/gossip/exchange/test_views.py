"""The view switch alone (gossip.exchange.switching): edges kept, added and dropped, L moved to the
start, and a late reply of the previous view placed at the new one's start."""

from __future__ import annotations

import math

import pytest
from _parts import shared

from continuized.gossip.errors import LocalError
from continuized.gossip.exchange.switching import Views
from continuized.gossip.exchange.vocabulary import Link
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.model.mixing import mix_values
from continuized.gossip.wire.schema import Reply


def test_kept_edges_keep_their_numbering_new_ones_start_afresh_settled_ones_are_returned() -> None:
    state = shared(peers=(1, 2))
    state.edges[0].next_seq, state.edges[0].cache[3] = 4, b"answer"
    state.edges[1].next_seq = 9
    state.horizon = 5.0  # announced
    views = Views(state)
    links = [Link(0, 1, 0.25, step=0.4), Link(7, 3, 0.75)]
    gone = views.switch(Ledger([1.0], [0, 7], eta=0.2, t0=5.0), links, start=5.0)
    assert list(gone) == [1]
    assert gone[1].next_seq == 9  # the dropped edge's state, for the caller to account for
    assert list(state.edges) == [0, 7]
    kept = state.edges[0]
    assert (kept.next_seq, kept.cache, kept.link) == (4, {3: b"answer"}, links[0])
    assert state.edges[7].next_seq == 1
    assert (state.eta, state.view_start, state.horizon, state.last) == (0.2, 5.0, math.inf, 5.0)


def test_an_edge_to_another_peer_under_the_same_number_starts_afresh() -> None:
    state = shared()
    state.edges[0].next_seq = 4
    Views(state).switch(Ledger([1.0], [0], eta=0.1), [Link(0, 5, 1.0)], start=1.0)
    assert (state.edges[0].link.peer, state.edges[0].next_seq) == (5, 1)


def test_links_that_differ_from_the_ledger_are_refused_and_change_nothing() -> None:
    state = shared()
    edges = state.edges
    with pytest.raises(LocalError, match=r"links \[0, 1\] and ledger edges \[0\] differ"):
        Views(state).switch(
            Ledger([1.0], [0], eta=0.1), [Link(0, 1, 0.5), Link(1, 2, 0.5)], start=1.0
        )
    assert state.edges is edges


def test_a_reply_of_the_previous_view_is_carried_to_the_start() -> None:
    state = shared()
    views = Views(state)
    views.switch(Ledger([1.0], [0], eta=0.3, t0=4.0), [Link(0, 1, 1.0)], start=4.0)
    late = Reply(src=1, edge=0, seq=1, t=3.0, dx=(0.5,), dz=(0.25,))
    assert views.carried(late) == mix_values([0.5], [0.25], 0.1, 1.0)  # the old eta


def test_a_reply_two_views_old_is_mixed_through_both_views_not_dropped() -> None:
    # Two deaths in one coordinator tick make views 1 and 2 start a hair apart; a released
    # exchange on a kept edge, answered after both switches, was applied by the server in view
    # 0. It used to be refused here ("two views old"), so the survivors' mass drifted.
    state = shared()
    views = Views(state)
    views.switch(Ledger([1.0], [0], eta=0.3, t0=4.0), [Link(0, 1, 1.0)], start=4.0)
    views.switch(Ledger([1.0], [0], eta=0.5, t0=6.0), [Link(0, 1, 1.0)], start=6.0)
    late = Reply(src=1, edge=0, seq=1, t=3.0, dx=(0.5,), dz=(0.25,))
    in_view_0 = mix_values([0.5], [0.25], 0.1, 1.0)  # eta 0.1 from 3 to 4
    assert views.carried(late) == mix_values(*in_view_0, 0.3, 2.0)  # eta 0.3 from 4 to 6
    assert views.carried(Reply(src=1, edge=0, seq=2, t=5.0, dx=(0.5,), dz=(0.0,))) == (
        mix_values([0.5], [0.0], 0.3, 1.0)
    )
