"""gossip.exchange.recent: the ring of recent samples gives numpy.percentile's figures, bit for
bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError
from continuized.gossip.exchange.recent import RecentSamples

samples = st.lists(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
    max_size=300,
)


@given(samples, st.integers(min_value=1, max_value=64))
def test_percentiles_equal_numpys_over_the_last_samples(values: list[float], size: int) -> None:
    recent = RecentSamples(size)
    for value in values:
        recent.add(value)
    window = values[-size:]
    assert len(recent) == len(window)
    if not window:
        assert recent.p50_p99() == (0.0, 0.0)
        return
    expected = np.percentile(np.array(window), [50, 99])
    assert recent.p50_p99() == (float(expected[0]), float(expected[1]))


@given(samples, st.integers(min_value=1, max_value=64))
def test_any_quantiles_equal_numpys_over_the_last_samples(values: list[float], size: int) -> None:
    recent = RecentSamples(size)
    for value in values:
        recent.add(value)
    window = values[-size:]
    if not window:
        assert recent.quantiles(0.05, 0.5, 0.99) == (0.0, 0.0, 0.0)
        return
    expected = np.percentile(np.array(window), [5, 50, 99, 0, 100])
    assert recent.quantiles(0.05, 0.5, 0.99, 0.0, 1.0) == tuple(float(e) for e in expected)


def test_a_sample_pushed_out_no_longer_counts() -> None:
    recent = RecentSamples(3)
    for value in (1e9, 1.0, 2.0, 3.0):
        recent.add(value)
    assert recent.p50_p99()[1] < 3.0 + 1e-12


def test_a_ring_of_no_samples_is_refused() -> None:
    with pytest.raises(ConfigError, match="size must be >= 1, got 0"):
        RecentSamples(0)
