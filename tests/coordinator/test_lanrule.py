"""The LAN rules the coordinator checks: rate against round trip, and the clocks' skew."""

from __future__ import annotations

import pytest

from coordinator.lanrule import RATE_K, SKEW_FLOOR, LanRule, rate_ceiling, skew_tolerance
from coordinator.records import NodeView


def views(
    offsets: list[float], rtt_ms: float, reports: int, delay: float = 0.0005
) -> dict[int, NodeView]:
    """Nodes whose clocks are off by ``offsets`` (seconds), reporting ``delay`` after the
    snapshot, with a round trip of ``rtt_ms``."""
    now = 1_000_000.0
    return {
        k: NodeView(k, wall=now + off, received=now + delay, rtt_p50_ms=rtt_ms, reports=reports)
        for k, off in enumerate(offsets)
    }


def test_the_rules_scale_with_n_rtt_and_rate() -> None:
    assert rate_ceiling(30, 2.0) == pytest.approx(RATE_K * 30 / 0.002)
    assert rate_ceiling(30, 4.0) == pytest.approx(rate_ceiling(30, 2.0) / 2)
    assert skew_tolerance(16, 200.0) == pytest.approx(2 * skew_tolerance(16, 400.0))


def test_a_rate_above_the_rule_warns_once() -> None:
    n, rtt = 16, 10.0
    rule = LanRule(n, 2 * rate_ceiling(n, rtt))
    assert rule.observe(views([0.0] * n, rtt, reports=1)) == []  # too early to judge
    warnings = rule.observe(views([0.0] * n, rtt, reports=5))
    assert len(warnings) == 1
    assert "LAN rule" in warnings[0]
    assert "10.00 ms" in warnings[0]
    assert rule.observe(views([0.0] * n, rtt, reports=6)) == []  # said once
    assert LanRule(n, 0.5 * rate_ceiling(n, rtt)).observe(views([0.0] * n, rtt, 5)) == []


def test_skew_is_estimated_from_the_reports_and_warned_past_the_tolerance() -> None:
    n, rate = 16, 100.0
    tolerance = max(skew_tolerance(n, rate), SKEW_FLOOR)
    small = [0.2 * tolerance * (k % 2) for k in range(n)]
    large = [3.0 * tolerance * (k % 2) for k in range(n)]
    quiet = LanRule(n, rate)
    for r in range(1, 25):
        assert quiet.observe(views(small, 1.0, r)) == []
    loud = LanRule(n, rate)
    said: list[str] = []
    for r in range(1, 25):
        said += loud.observe(views(large, 1.0, r))
    assert len(said) == 1
    assert "clocks differ" in said[0]
    skew = loud.skew()
    assert skew == pytest.approx(3.0 * tolerance, abs=1e-6)  # same delay: it cancels out
