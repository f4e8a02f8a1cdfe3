"""The src of a frame is bound to the key it came in on: a forged src changes nothing."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.vocabulary import Link, TimeBase
from continuized.gossip.model.ledger import Ledger


def line3_middle() -> tuple[Exchanger, Exchanger]:
    """Node 1 of line:3 (edges 0: 0-1, 1: 1-2), and node 0 talking to it."""
    timebase = TimeBase(epoch=100.0, rate=2.0)
    middle = Exchanger(
        1, [Link(0, 0, 0.5), Link(1, 2, 0.5)], Ledger([3.0], [0, 1], eta=0.1), 0.5, timebase
    )
    left = Exchanger(0, [Link(0, 1, 0.5)], Ledger([0.0], [0], eta=0.1), 0.5, timebase)
    return left, middle


@given(st.integers(0, 50).filter(lambda s: s != 0))
def test_a_frame_whose_src_is_not_the_authenticated_sender_is_counted_and_ignored(
    sender: int,
) -> None:
    left, middle = line3_middle()
    out = left.initiate(0, now=101.0)
    assert out is not None
    before = middle.ledger.state(5.0)
    # Node 0's genuine request, but it came in on another node's key.
    assert middle.receive(out.frame, now=101.1, sender=sender) is None
    assert (middle.counters.forged, middle.counters.served, middle.counters.rejected) == (1, 0, 0)
    np.testing.assert_array_equal(middle.ledger.state(5.0), before)
    # The same frame on node 0's own key is served.
    answer = middle.receive(out.frame, now=101.2, sender=0)
    assert answer is not None
    assert middle.counters.served == 1
    # And a reply is checked the same way on the initiator's side.
    assert left.receive(answer, now=101.3, sender=2) is None
    assert left.counters.forged == 1
    assert left.pending == 1
    left.receive(answer, now=101.3, sender=1)
    assert left.pending == 0


def test_without_a_sender_nothing_is_checked() -> None:
    left, middle = line3_middle()
    out = left.initiate(0, now=101.0)
    assert out is not None
    assert middle.receive(out.frame, now=101.1) is not None
    assert middle.counters.forged == 0
