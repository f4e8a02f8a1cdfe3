"""The ledger: a node's state as its initial value plus per-edge flows, mixed on demand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError, LocalError
from continuized.gossip.model.jumps import Flow, edge_flow, jump
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.model.mixing import mix

values = st.floats(-10, 10, allow_nan=False)
times = st.floats(0, 200, allow_nan=False)
etas = st.sampled_from([0.0, 0.002, 0.05, 0.3])


@given(values, values, values, values, etas, st.lists(times, min_size=1, max_size=8), times)
@settings(max_examples=200)
def test_late_application_equals_on_time(
    x_v: float, x_w: float, fz: float, gap: float, eta: float, jump_times: list[float], lag: float
) -> None:
    """Flows added late, in any order, give the state of jumping on time and mixing after."""
    jump_times = sorted(jump_times)
    c = abs(fz) + 0.1
    # Reference: one node v and a fixed partner, stepped through its jumps in time order.
    ref_x, ref_z, t_prev = np.array([x_v]), np.array([x_v]), 0.0
    flows: list[tuple[Flow, float]] = []
    for k, t_k in enumerate(jump_times):
        ref_x, ref_z = mix(ref_x, ref_z, eta, t_k - t_prev)
        partner = np.array([x_w + gap * k])
        flow = edge_flow(ref_x, partner, c)
        new_x, new_z, _, _ = jump(ref_x, ref_z, partner, partner, c)
        np.testing.assert_allclose(new_x, ref_x + flow.dx)
        ref_x, ref_z, t_prev = new_x, new_z, t_k
        flows.append((flow, t_k))
    t_end = jump_times[-1] + lag
    ref_x, ref_z = mix(ref_x, ref_z, eta, t_end - t_prev)

    ledger = Ledger([x_v], [3, 7], eta=eta)
    for flow, t_k in reversed(flows):  # the worst order: last jump first
        ledger.add(7, flow, t_k)
    x, z = ledger.state(t_end)
    np.testing.assert_allclose(x, ref_x, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(z, ref_z, rtol=1e-9, atol=1e-9)


@given(st.lists(st.tuples(st.integers(0, 2), values, values, times), max_size=20), etas, times)
def test_two_ends_conserve_mass_and_hold_opposite_ledgers(
    flows: list[tuple[int, float, float, float]], eta: float, lag: float
) -> None:
    # Read after the last flow: reading far before a flow is exact in theory but amplifies
    # the half-difference by exp(2 eta tau), which no floating point survives.
    t_end = max((t for *_, t in flows), default=0.0) + lag
    a = Ledger([1.0, -2.0], [0, 1, 2], eta=eta)
    b = Ledger([0.5, 4.0], [0, 1, 2], eta=eta)
    for edge, dx, dz, t in flows:
        flow = Flow(np.array([dx, -dx]), np.array([dz, 2 * dz]))
        a.add(edge, flow, t)
        b.add(edge, flow, t, sign=-1.0)
    xa, za = a.state(t_end)
    xb, zb = b.state(t_end)
    np.testing.assert_allclose(xa + xb, [1.5, 2.0], atol=1e-9)
    np.testing.assert_allclose(za + zb, [1.5, 2.0], atol=1e-9)
    for edge in range(3):
        fa, fb = a.edge_total(edge, t_end), b.edge_total(edge, t_end)
        np.testing.assert_allclose(fa.dx + fb.dx, 0.0, atol=1e-9)
        np.testing.assert_allclose(fa.dz + fb.dz, 0.0, atol=1e-9)


def test_undo_is_adding_the_negative() -> None:
    ledger = Ledger([2.0], [0], eta=0.1)
    before = ledger.state(5.0)
    flow = Flow(np.array([0.3]), np.array([-1.2]))
    ledger.add(0, flow, 1.0)
    assert not np.allclose(ledger.state(5.0)[0], before[0])
    ledger.add(0, flow, 1.0, sign=-1.0)
    np.testing.assert_allclose(ledger.state(5.0), before, atol=1e-12)


def test_recovery_from_the_neighbours_ledgers_is_exact() -> None:
    eta = 0.05
    rng = np.random.default_rng(1)
    me = Ledger([1.0], [0, 1], eta=eta)
    left = Ledger([0.0], [0], eta=eta)
    right = Ledger([3.0], [1], eta=eta)
    for t in np.sort(rng.uniform(0, 80, size=40)):
        edge, peer = (0, left) if rng.random() < 0.5 else (1, right)
        flow = edge_flow(me.state(t)[0], peer.state(t)[0], c=2.0)
        me.add(edge, flow, t)
        peer.add(edge, flow, t, sign=-1.0)
    lost = me.state(90.0)
    reborn = Ledger([1.0], [0, 1], eta=eta)
    for edge, peer in ((0, left), (1, right)):
        theirs = peer.edge_total(edge, 85.0)
        reborn.set_edge_total(edge, Flow(-theirs.dx, -theirs.dz), 85.0)
    np.testing.assert_allclose(reborn.state(90.0), lost, rtol=1e-12)


def test_long_runs_stay_finite_and_exact() -> None:
    """t far beyond exp overflow (2 eta t >> 709): the reference time moves along."""
    eta = 0.01
    a, b = Ledger([1.0], [0], eta=eta), Ledger([0.0], [0], eta=eta)
    for t in np.linspace(0, 1e6, 2001):
        flow = edge_flow(a.state(t)[0], b.state(t)[0], c=0.5)
        a.add(0, flow, t)
        b.add(0, flow, t, sign=-1.0)
    xa, za = a.state(1e6 + 1)
    xb, zb = b.state(1e6 + 1)
    assert np.all(np.isfinite([xa, za, xb, zb]))
    assert float(xa[0] + xb[0]) == pytest.approx(1.0, rel=1e-12)
    assert float(xa[0]) == pytest.approx(0.5, abs=1e-9)


def test_bad_inputs_are_refused_without_change() -> None:
    with pytest.raises(ConfigError, match="initial value must be a finite"):
        Ledger([np.nan], [0], eta=0.1)
    with pytest.raises(ConfigError, match="eta must be finite and >= 0"):
        Ledger([0.0], [0], eta=-1.0)
    with pytest.raises(ConfigError, match="edges must be distinct"):
        Ledger([0.0], [0, 0], eta=0.1)
    ledger = Ledger([1.0], [4], eta=0.5)
    with pytest.raises(LocalError, match=r"edge 5 is not at this node; its edges are \[4\]"):
        ledger.add(5, Flow(np.array([1.0]), np.array([1.0])), 0.0)
    before = ledger.state(1.0)
    with pytest.raises(ConfigError, match="not finite"):
        ledger.add(4, Flow(np.array([1.0]), np.array([0.0])), 1e6)  # exp(+1e6) overflows
    with pytest.raises(ConfigError, match="must be finite"):
        ledger.add(4, Flow(np.array([1.0]), np.array([0.0])), float("nan"))
    np.testing.assert_array_equal(ledger.state(1.0), before)
    assert ledger.dim == 1
    assert ledger.initial.tolist() == [1.0]
