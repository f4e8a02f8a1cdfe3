"""gossip.exchange.clockskew: the offset bound always holds the true offset, and tightens."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.gossip.exchange.clockskew import ClockOffsets, skew_tolerance

OFFSETS = st.floats(-5.0, 5.0)  # the peer's clock minus ours, seconds
DELAYS = st.floats(0.0, 0.05)  # one way, seconds: asymmetric and jittered at will
NOW = 1.7e9  # a wall clock: Unix seconds
EXCHANGES = st.lists(st.tuples(st.floats(0.0, 100.0), DELAYS, DELAYS, DELAYS), min_size=1)


def _run(theta: float, exchanges: list[tuple[float, float, float, float]]) -> ClockOffsets:
    """Exchanges with a peer whose clock reads ``true + theta``: each ``(start, out, serve,
    back)`` sends at ``start``, is served ``out`` later after ``serve``, and returns ``back``
    later (true times; each side stamps its own clock)."""
    offsets = ClockOffsets()
    for start, out, serve, back in exchanges:
        start += NOW
        sent = start  # our clock reads true time
        wall = start + out + serve + theta
        received = start + out + serve + back
        offsets.add(peer=1, sent=sent, wall=wall, received=received)
    return offsets


@given(theta=OFFSETS, exchanges=EXCHANGES)
def test_the_bound_holds_the_true_offset_within_half_the_shortest_round_trip(
    theta: float, exchanges: list[tuple[float, float, float, float]]
) -> None:
    est = _run(theta, exchanges).estimate(1)
    assert est is not None
    slack = 1e-6  # float rounding of sums near 1.7e9 s (an ulp there is 2.4e-7 s)
    assert est.low - slack <= theta <= est.high + slack
    shortest = min(out + serve + back for _, out, serve, back in exchanges)
    assert est.error <= shortest / 2 + slack
    assert abs(est.offset - theta) <= shortest / 2 + slack
    assert est.samples == len(exchanges)  # no clock stepped: every sample kept


@given(theta=OFFSETS, exchanges=EXCHANGES, tolerance=st.floats(0.0, 1.0))
def test_a_warning_is_never_wrong(
    theta: float, exchanges: list[tuple[float, float, float, float]], tolerance: float
) -> None:
    est = _run(theta, exchanges).estimate(1)
    assert est is not None
    if est.past(tolerance + 1e-6):
        assert abs(theta) > tolerance


@given(before=OFFSETS, after=OFFSETS)
def test_a_clock_that_steps_starts_the_bound_again(before: float, after: float) -> None:
    offsets = ClockOffsets()
    offsets.add(peer=2, sent=NOW, wall=NOW + 0.0005 + before, received=NOW + 0.001)
    offsets.add(peer=2, sent=NOW + 1, wall=NOW + 1.0005 + after, received=NOW + 1.001)
    est = offsets.estimate(2)
    assert est is not None
    if abs(after - before) > 0.001 + 1e-6:  # the two bounds (1 ms wide each) are disjoint
        # A step, seen: the bound starts again, on the latest clock's offset.
        assert est.samples == 1
        assert est.low - 1e-6 <= after <= est.high + 1e-6
    else:
        # A step within the round trip cannot be told from the round trip's own uncertainty:
        # the bound holds both samples, so it is within a round trip of the latest offset.
        assert est.low - 0.001 - 1e-6 <= after <= est.high + 0.001 + 1e-6


def test_unstamped_or_backward_samples_say_nothing() -> None:
    offsets = ClockOffsets()
    offsets.add(peer=0, sent=1.0, wall=0.0, received=1.1)  # a version-5 peer
    offsets.add(peer=0, sent=1.0, wall=5.0, received=0.9)  # our clock stepped back
    offsets.add(peer=0, sent=1.0, wall=math.nan, received=1.1)
    assert offsets.estimate(0) is None
    assert offsets.worst() is None


def test_the_worst_peer_is_the_surest_offset() -> None:
    offsets = ClockOffsets()
    offsets.add(peer=1, sent=10.0, wall=10.020, received=10.010)  # 10 to 20 ms
    offsets.add(peer=2, sent=10.0, wall=9.970, received=10.002)  # -32 to -30 ms
    offsets.add(peer=3, sent=10.0, wall=10.5, received=11.0)  # -0.5 to 0.5 s: unsure
    worst = offsets.worst()
    assert worst is not None
    assert worst[0] == 2
    assert (worst[1].low, worst[1].high) == pytest.approx((-0.032, -0.030))
    assert worst[1].samples == 1


def test_the_tolerance_is_five_mean_gaps_between_a_nodes_activations() -> None:
    assert skew_tolerance(9, 100.0) == 5.0 * 9 / 200.0
