"""The float fast paths of the live nodes agree with the array functions of the core."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError
from continuized.gossip.model.jumps import Flow, edge_flow, edge_flow_values
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.model.mixing import decay, decay_value, mix, mix_values

values = st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=4)
etas = st.floats(0.0, 2.0)
taus = st.floats(-5.0, 50.0)


@settings(deadline=None)
@given(values, etas, taus)
def test_mix_values_agrees_with_mix(x: list[float], eta: float, tau: float) -> None:
    z = [0.3 * v - 1.0 for v in x]
    fast_x, fast_z = mix_values(x, z, eta, tau)
    slow_x, slow_z = mix(np.array(x), np.array(z), eta, tau)
    np.testing.assert_allclose(fast_x, slow_x, rtol=1e-14, atol=1e-9)
    np.testing.assert_allclose(fast_z, slow_z, rtol=1e-14, atol=1e-9)
    assert decay_value(eta, tau) == pytest.approx(float(decay(eta, tau)), rel=1e-15)


@settings(deadline=None)
@given(values, st.floats(0.0, 20.0))
def test_edge_flow_values_agrees_with_edge_flow(x_v: list[float], c: float) -> None:
    x_w = [1.0 - 2.0 * v for v in x_v]
    dx, dz = edge_flow_values(x_v, x_w, c)
    flow = edge_flow(np.array(x_v), np.array(x_w), c)
    assert dx == flow.dx.tolist()
    assert dz == flow.dz.tolist()


def test_decay_value_overflows_to_inf() -> None:
    assert decay_value(1.0, -1e6) == float("inf")


@settings(deadline=None, max_examples=30)
@given(st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_ledger_float_and_array_paths_agree(dim: int, seed: int) -> None:
    """Flows added through add() and add_values() give the same states, by both readers."""
    rng = np.random.default_rng(seed)
    eta = float(rng.uniform(0.0, 0.5))
    initial = rng.normal(size=dim)
    by_array, by_floats = Ledger(initial, [3, 7], eta), Ledger(initial, [3, 7], eta)
    t = 0.0
    for _ in range(50):
        t += float(rng.exponential(1.0))
        when = t - float(rng.uniform(0.0, 2.0))  # flows arrive late, out of order
        edge = int(rng.choice([3, 7]))
        dx, dz = rng.normal(size=dim), rng.normal(size=dim)
        sign = float(rng.choice([1.0, -1.0]))
        by_array.add(edge, Flow(dx, dz), when, sign)
        by_floats.add_values(edge, dx.tolist(), dz.tolist(), when, sign)
        x_a, z_a = by_array.state(t)
        x_f, z_f = by_floats.state_values(t)
        np.testing.assert_allclose(x_f, x_a, rtol=1e-13, atol=1e-12)
        np.testing.assert_allclose(z_f, z_a, rtol=1e-13, atol=1e-12)
        # The array reader is the float reader wrapped: exactly the same numbers.
        assert by_floats.state(t)[0].tolist() == by_floats.state_values(t)[0]


@settings(deadline=None, max_examples=30)
@given(st.integers(0, 2**32 - 1))
def test_the_scalar_ledger_computes_what_the_vector_loops_do(seed: int) -> None:
    """dim 1 skips the loops: the same flows in both components of a dim-2 ledger give, in
    each, exactly the scalar ledger's numbers (same operations in the same order)."""
    rng = np.random.default_rng(seed)
    eta = float(rng.uniform(0.0, 0.5))
    scalar, pair = Ledger([0.25], [3, 7], eta), Ledger([0.25, 0.25], [3, 7], eta)
    t = 0.0
    for _ in range(50):
        t += float(rng.exponential(1.0))
        when = t - float(rng.uniform(0.0, 2.0))
        edge, sign = int(rng.choice([3, 7])), float(rng.choice([1.0, -1.0]))
        dx, dz = float(rng.normal()), float(rng.normal())
        scalar.add_values(edge, [dx], [dz], when, sign)
        pair.add_values(edge, [dx, dx], [dz, dz], when, sign)
        (x,), (z,) = scalar.state_values(t)
        assert pair.state_values(t) == ([x, x], [z, z])
        assert scalar.edge_total(edge, t).dx.tolist() == pair.edge_total(edge, t).dx.tolist()[:1]


def test_add_values_refuses_bad_flows_without_change() -> None:
    ledger = Ledger([1.0, 2.0], [0], eta=0.5)
    before = ledger.state_values(1.0)
    with pytest.raises(ConfigError, match="dim is 2"):
        ledger.add_values(0, [1.0], [1.0], 1.0)
    with pytest.raises(ConfigError, match="not finite"):
        ledger.add_values(0, [1.0, 0.0], [0.0, 0.0], 1e6)
    assert ledger.state_values(1.0) == before
