"""Jumps as antisymmetric flows: mass conservation, late jumps, ARG = RG on complete graphs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.jumps import apply_flow, edge_flow, jump, late_flow
from continuized.gossip.model.mixing import mix
from continuized.gossip.model.values import initial_values
from continuized.gossip.sim.simulator import simulate

finite = st.floats(-100.0, 100.0, allow_nan=False)


def test_jump_follows_the_spec() -> None:
    xv, zv, xw, zw = jump(1.0, 2.0, 3.0, -1.0, c=0.25)
    assert (float(xv), float(xw)) == (2.0, 2.0)
    assert float(zv) == 2.0 + 0.25 * (3.0 - 1.0)
    assert float(zw) == -1.0 + 0.25 * (1.0 - 3.0)


@st.composite
def event_sequences(draw: st.DrawFn) -> tuple[int, list[tuple[int, int, float]], list[float]]:
    n = draw(st.integers(2, 8))
    pairs = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] != p[1])
    events = draw(st.lists(st.tuples(pairs, st.floats(0.0, 5.0)), max_size=40))
    initial = draw(st.lists(finite, min_size=n, max_size=n))
    return n, [(v, w, dt) for (v, w), dt in events], initial


@settings(max_examples=80, deadline=None)
@given(seq=event_sequences(), c=st.floats(0.0, 10.0), eta=st.floats(0.0, 1.0))
def test_mass_is_conserved_by_any_sequence_of_jumps_and_mixings(
    seq: tuple[int, list[tuple[int, int, float]], list[float]], c: float, eta: float
) -> None:
    _, events, initial = seq
    x = np.array(initial, dtype=np.float64)
    z = x.copy()
    total = x.sum()
    scale = 1.0 + np.abs(x).sum()
    for v, w, dt in events:
        x, z = mix(x, z, eta, dt)
        x[v], z[v], x[w], z[w] = jump(x[v], z[v], x[w], z[w], c)
        # Rounding is relative to the values summed, and repeated jumps with a large c can
        # grow them by orders of magnitude (hypothesis found a drift of 4e-7 on a sum of 1.35).
        now = np.abs(x).sum() + np.abs(z).sum()
        tol = 1e-9 * (scale + now) * (1 + c) ** 2
        assert x.sum() == pytest.approx(total, abs=tol)
        assert z.sum() == pytest.approx(total, abs=tol)


@settings(max_examples=80, deadline=None)
@given(
    xv=finite, zv=finite, xw=finite, zw=finite,
    c=st.floats(0.0, 10.0), eta=st.floats(0.0, 1.0), delay=st.floats(0.0, 10.0),
)  # fmt: skip
def test_late_jump_equals_on_time_jump(
    xv: float, zv: float, xw: float, zw: float, c: float, eta: float, delay: float
) -> None:
    # On time: jump at T, then mix both ends over the delay.
    on_time = jump(xv, zv, xw, zw, c)
    ref_v = mix(on_time[0], on_time[1], eta, delay)
    ref_w = mix(on_time[2], on_time[3], eta, delay)
    # Late: each end mixes without the jump, then adds the flow mixed over the delay.
    flow = late_flow(edge_flow(xv, xw, c), eta, delay)
    late_v = apply_flow(*mix(xv, zv, eta, delay), flow, 1.0)
    late_w = apply_flow(*mix(xw, zw, eta, delay), flow, -1.0)
    scale = 1e-9 * (1.0 + c) * 400.0
    np.testing.assert_allclose(np.array(late_v), np.array(ref_v), atol=scale)
    np.testing.assert_allclose(np.array(late_w), np.array(ref_w), atol=scale)


@settings(max_examples=40, deadline=None)
@given(xv=finite, xw=finite, delay=st.floats(0.0, 10.0))
def test_a_flow_moved_back_in_time_undoes_itself(xv: float, xw: float, delay: float) -> None:
    flow = edge_flow(xv, xw, c=3.0)
    there = late_flow(flow, 0.2, delay)
    back = late_flow(there, 0.2, -delay)
    np.testing.assert_allclose([back.dx, back.dz], [flow.dx, flow.dz], atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(seq=event_sequences())
def test_arg_equals_rg_on_a_complete_graph_step_by_step(
    seq: tuple[int, list[tuple[int, int, float]], list[float]],
) -> None:
    n, events, initial = seq
    if n < 3:
        n = 3
        initial = [*initial, 0.0][:3]
    q = graph_quantities(parse_topology(f"complete:{n}"))
    arg = gossip_params("arg", q.mu_gossip, q.r_max)
    assert arg.c == pytest.approx(0.5)
    x = np.array(initial[:n], dtype=np.float64)
    z = x.copy()
    rg = x.copy()
    for v, w, dt in events:
        v, w = v % n, w % n
        if v == w:
            continue
        x, z = mix(x, z, arg.eta, dt)
        x[v], z[v], x[w], z[w] = jump(x[v], z[v], x[w], z[w], arg.c)
        rg[v] = rg[w] = (rg[v] + rg[w]) / 2
        np.testing.assert_allclose(x, rg, atol=1e-9)
        np.testing.assert_allclose(z, rg, atol=1e-9)


def test_arg_equals_rg_on_a_complete_graph_in_the_simulator() -> None:
    topo = parse_topology("complete:10")
    q = graph_quantities(topo)
    initial = initial_values("gaussian:2", 10)
    grid = np.linspace(0.0, 150.0, 16)
    rg = simulate(topo, gossip_params("rg", q.mu_gossip, q.r_max), initial, grid, 30, 4)
    arg = simulate(topo, gossip_params("arg", q.mu_gossip, q.r_max), initial, grid, 30, 4)
    np.testing.assert_allclose(arg.errors, rg.errors, rtol=1e-7, atol=1e-20)


@given(xv=finite, xw=finite, c=st.floats(0.0, 10.0), step=st.floats(0.0, 1.0))
def test_a_general_step_is_antisymmetric_and_half_is_gossip(
    xv: float, xw: float, c: float, step: float
) -> None:
    """edge_flow(u_v, u_w, c, s): dx = s (u_w - u_v) into v, exactly the opposite into w; the
    default s = 1/2 is the gossip jump (both ends meet at their average)."""
    into_v, into_w = edge_flow(xv, xw, c, step), edge_flow(xw, xv, c, step)
    assert float(into_v.dx) == -float(into_w.dx) == step * (xw - xv)
    assert float(into_v.dz) == -float(into_w.dz) == c * (xw - xv)
    half = edge_flow(xv, xw, c)
    assert float(half.dx) == float(edge_flow(xv, xw, c, 0.5).dx) == 0.5 * (xw - xv)
