"""A node's exact samples on a grid of times (gossip.exchange.trace), against its ledger step by
step.

The rule itself (samples equal the sequential replay while jumps are in flight) is checked in
test_exchange_exact.py over whole networks with random latencies; here, its pieces.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError
from continuized.gossip.exchange.trace import (
    GRID_SECONDS,
    MAX_CLUSTER_SAMPLES,
    MAX_SAMPLES,
    SAMPLES_PER_REPORT,
    Trace,
    trace_step,
)
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.model.mixing import mix_values


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.01, 3.0), st.floats(-1.0, 1.0), st.floats(-1.0, 1.0)),
        min_size=1,
        max_size=30,
    ),
    st.floats(0.05, 2.0),
    st.floats(0.0, 0.5),
)
def test_every_sample_is_the_state_between_the_jumps_around_it(
    jumps: list[tuple[float, float, float]], step: float, eta: float
) -> None:
    """Jumps applied in time order: a grid time's sample is the state after every jump at or
    before it, mixed to it, whatever came after."""
    ledger = Ledger([1.0], [0], eta=eta)
    trace = Trace(step)
    t = 0.0
    applied: list[tuple[float, float, float]] = []
    for gap, dx, dz in jumps:
        t += gap
        trace.before_jump(ledger, t)
        ledger.add_values(0, [dx], [dz], t)
        applied.append((t, dx, dz))
    # A jump on a grid time up to rounding (1.0 + 1.0 against 1/3 + 5/3) is on either side of
    # it, depending on how its time was summed: the rule is for a jump clearly before or after.
    assume(all(abs(when / step - round(when / step)) > 1e-9 for when, _, _ in applied))
    trace.finish(ledger, t + 1.0)
    samples = trace.take()
    assert [row[0] for row in samples] == [k * step for k in range(len(samples))]
    assert samples[-1][0] < t + 1.0 <= samples[-1][0] + step
    for g, x in samples:
        # The state at g from scratch: the initial value and the jumps at times <= g.
        xs, zs = mix_values([1.0], [1.0], eta, g)
        for when, dx, dz in applied:
            if when <= g:
                fx, fz = mix_values([dx], [dz], eta, g - when)
                xs, zs = [xs[0] + fx[0]], [zs[0] + fz[0]]
        assert x == pytest.approx(xs[0], rel=1e-9, abs=1e-12)


def test_the_grid_comes_from_the_index_without_drift() -> None:
    ledger = Ledger([0.0], [0], eta=0.0)
    trace = Trace(0.1, start=1e6)
    trace.before_jump(ledger, 1e6 + 1.0)
    times = [row[0] for row in trace.take()]
    assert times == [k * 0.1 for k in range(10_000_000, 10_000_010)]


def test_skip_to_never_reads_before_it_and_never_goes_back() -> None:
    ledger = Ledger([2.0], [0], eta=0.0)
    trace = Trace(1.0)
    trace.skip_to(3.5)
    trace.skip_to(1.0)  # earlier: no effect
    trace.before_jump(ledger, 6.0)
    assert trace.take() == [[4.0, 2.0], [5.0, 2.0]]
    assert trace.take() == []


def test_a_trace_nobody_takes_keeps_only_the_latest_samples() -> None:
    ledger = Ledger([0.0], [0], eta=0.0)
    trace = Trace(1.0)
    trace.before_jump(ledger, MAX_SAMPLES + 10.5)
    samples = trace.take()
    assert len(samples) == MAX_SAMPLES
    assert samples[-1][0] == MAX_SAMPLES + 10.0


def test_the_step_gives_a_few_samples_per_report_and_bad_values_are_named() -> None:
    assert trace_step(1000.0, 0.1) * SAMPLES_PER_REPORT == pytest.approx(100.0)
    with pytest.raises(ConfigError, match=r"rate 0\.0"):
        trace_step(0.0, 0.1)
    with pytest.raises(ConfigError, match=r"metrics period -1\.0"):
        trace_step(10.0, -1.0)
    with pytest.raises(ConfigError, match="nodes must be >= 1, got 0"):
        trace_step(10.0, 0.1, nodes=0)
    with pytest.raises(ConfigError, match="nan"):
        Trace(math.nan)
    with pytest.raises(ConfigError, match="start must be finite, got inf"):
        Trace(1.0, start=math.inf)


def test_samples_are_vectors_for_a_dimension_above_one() -> None:
    ledger = Ledger(np.array([1.0, -1.0]), [0], eta=0.0)
    trace = Trace(1.0)
    trace.before_jump(ledger, 0.5)
    assert trace.take() == [[0.0, 1.0, -1.0]]


@settings(max_examples=300, deadline=None)
@given(st.floats(1.0, 1e5), st.floats(0.01, 10.0), st.integers(1, 100_000))
def test_reports_further_apart_carry_more_samples_within_the_clusters_budget(
    rate: float, period: float, nodes: int
) -> None:
    """At least SAMPLES_PER_REPORT grid times a report; one every GRID_SECONDS when the whole
    cluster then sends at most MAX_CLUSTER_SAMPLES a second; never more than either gives."""
    seconds = trace_step(rate, period, nodes) / rate  # wall seconds between grid times
    assert seconds <= period / SAMPLES_PER_REPORT * (1 + 1e-12)
    if nodes / GRID_SECONDS <= MAX_CLUSTER_SAMPLES:  # 40 a second each is affordable
        assert seconds <= GRID_SECONDS * (1 + 1e-12)
    per_second = nodes / seconds  # samples a second from the whole cluster
    allowed = max(MAX_CLUSTER_SAMPLES, nodes * SAMPLES_PER_REPORT / period)
    assert per_second <= allowed * (1 + 1e-9)
