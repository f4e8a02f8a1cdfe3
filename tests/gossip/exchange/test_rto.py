"""The retry timer and the retry schedule alone (gossip.exchange.rto)."""

from __future__ import annotations

import pytest

from continuized.gossip.exchange.rto import RetrySchedule, RetryTimer
from continuized.gossip.exchange.vocabulary import Pending


def test_the_timeout_is_the_initial_one_until_a_round_trip_is_measured() -> None:
    timer = RetryTimer(initial=0.2, low=0.01, high=2.0)
    assert (timer.timeout(), timer.srtt()) == (0.2, None)
    assert timer.percentiles_ms() == {"p5": 0.0, "p50": 0.0, "p99": 0.0}


def test_the_timeout_follows_srtt_plus_four_rttvar_within_its_bounds() -> None:
    timer = RetryTimer(initial=0.2, low=0.01, high=2.0)
    timer.sample(0.1, retried=False)
    assert timer.srtt() == 0.1
    assert timer.timeout() == pytest.approx(0.1 + 4 * 0.05)
    timer.sample(0.3, retried=False)  # Jacobson/Karels, gains 1/8 and 1/4
    rttvar = 0.05 + 0.25 * (0.2 - 0.05)
    assert timer.srtt() == pytest.approx(0.1 + 0.125 * 0.2)
    assert timer.timeout() == pytest.approx(0.125 + 4 * rttvar)
    for _ in range(50):
        timer.sample(0.002, retried=False)
    assert timer.timeout() == 0.01  # the floor
    for _ in range(5):
        timer.sample(5.0, retried=False)
    assert timer.timeout() == 2.0  # the ceiling


def test_a_retried_exchanges_round_trip_is_recorded_but_not_sampled() -> None:
    timer = RetryTimer(initial=0.2, low=0.01, high=2.0)
    timer.sample(1.5, retried=True)  # Karn's rule: ambiguous
    assert timer.srtt() is None
    assert timer.percentiles_ms()["p50"] == pytest.approx(1500.0)


def test_the_low_round_trip_is_the_5th_percentile() -> None:
    timer = RetryTimer(initial=0.2, low=0.01, high=2.0)
    for k in range(101):  # 1 ms to 101 ms: the 5th percentile is the 6th smallest
        timer.sample((k + 1) / 1e3, retried=False)
    rtt = timer.percentiles_ms()
    assert rtt["p5"] == pytest.approx(6.0)
    assert rtt["p50"] == pytest.approx(51.0)
    assert rtt["p99"] == pytest.approx(100.0)


def test_a_floor_above_the_initial_timeout_is_lowered_to_it() -> None:
    assert RetryTimer(initial=0.005, low=0.01, high=2.0).low == 0.005


def _pending(edge: int, seq: int, deadline: float) -> Pending:
    return Pending(edge, seq, 1, b"", 0.0, 0.0, 1.0, deadline)


def test_deadlines_come_out_earliest_first_and_stale_entries_are_skipped() -> None:
    live: dict[tuple[int, int], Pending] = {}
    schedule = RetrySchedule(lambda edge, seq: live.get((edge, seq)))
    for p in (_pending(0, 1, 5.0), _pending(1, 1, 3.0), _pending(0, 2, 4.0)):
        live[(p.edge, p.seq)] = p
        schedule.arm(p)
    assert (schedule.next(), len(schedule)) == (3.0, 3)
    del live[(1, 1)]  # settled: its entry is stale
    assert schedule.next() == 4.0
    assert len(schedule) == 2  # dropped lazily, when it came to the top
    rearmed = live[(0, 2)]
    rearmed.deadline = 8.0  # retried: armed again at its new deadline
    schedule.arm(rearmed)
    assert schedule.pop_due(now=4.9) is None
    assert schedule.pop_due(now=5.0) is live[(0, 1)]
    assert schedule.pop_due(now=7.9) is None  # the old 4.0 entry of (0, 2) is stale
    assert schedule.next() == 8.0
    schedule.clear()
    assert (schedule.next(), len(schedule)) == (None, 0)
