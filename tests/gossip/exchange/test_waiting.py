"""The owed activations alone (gossip.exchange.waiting): arrival order, a refused one first, its
pause, and the back-off's bounds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.gossip.exchange.waiting import (
    MAX_BACKOFF_DOUBLINGS,
    Activation,
    Waiting,
    backoff_delay,
)


def test_activations_start_in_arrival_order_and_a_refused_one_first() -> None:
    owed = Waiting()
    for edge in (3, 4):
        owed.add(Activation(edge))
    owed.add_first(Activation(5, ready=10.0, not_before=2.5, bounces=1))
    assert (len(owed), owed.next_ready()) == (3, 10.0)
    assert owed.take_ready(now=9.9) is None  # the head pauses, and the queue behind it
    first = owed.take_ready(now=10.0)
    assert first is not None
    assert (first.edge, first.not_before, first.bounces) == (5, 2.5, 1)
    taken = [owed.take_ready(now=10.0) for _ in range(2)]
    assert [a.edge for a in taken if a is not None] == [3, 4]
    assert (owed.take_ready(now=11.0), owed.next_ready(), len(owed)) == (None, None, 0)


def test_clear_forgets_everything_and_counts_it() -> None:
    owed = Waiting()
    owed.add(Activation(1))
    owed.add(Activation(2))
    assert owed.clear() == 2
    assert (len(owed), owed.clear()) == (0, 0)


def test_an_activation_defaults_to_ready_now_with_no_floor_and_an_unknown_tick() -> None:
    activation = Activation(7)
    assert (activation.ready, activation.not_before, activation.bounces) == (
        -np.inf,
        -np.inf,
        0,
    )
    assert np.isnan(activation.due)


@given(st.integers(1, 12), st.floats(1e-5, 1.0), st.integers(0, 2**32 - 1))
def test_the_pause_is_random_around_a_round_trip_doubling_up_to_a_cap(
    bounces: int, rtt: float, seed: int
) -> None:
    delay = backoff_delay(bounces, rtt, np.random.default_rng(seed))
    scale = rtt * 2.0 ** min(bounces - 1, MAX_BACKOFF_DOUBLINGS)
    assert 0.5 * scale <= delay <= 1.5 * scale


def test_the_pause_is_spread_so_that_two_nodes_do_not_retry_in_step() -> None:
    rng = np.random.default_rng(1)
    delays = [backoff_delay(1, 0.01, rng) for _ in range(2000)]
    assert np.mean(delays) == pytest.approx(0.01, rel=0.05)
    assert np.std(delays) == pytest.approx(0.01 / np.sqrt(12), rel=0.1)  # uniform, width rtt
