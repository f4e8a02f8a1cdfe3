"""The convex-case mixing flow of continuized Nesterov against a numerical ODE solver."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

from continuized.gossip.model.mixing import mix_convex

finite = st.floats(-10.0, 10.0, allow_nan=False)
times = st.floats(0.05, 50.0, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(x=finite, z=finite, t0=times, dt=st.floats(0.0, 50.0))
def test_mix_convex_solves_the_ode(x: float, z: float, t0: float, dt: float) -> None:
    t1 = t0 + dt

    def rhs(t: float, state: np.ndarray) -> np.ndarray:
        return np.array([2.0 / t * (state[1] - state[0]), 0.0])

    sol = solve_ivp(rhs, (t0, t1), [x, z], rtol=1e-11, atol=1e-12)
    got_x, got_z = mix_convex(x, z, t0, t1)
    np.testing.assert_allclose([got_x, got_z], sol.y[:, -1], rtol=1e-7, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(x=finite, z=finite, t0=st.floats(0.0, 10.0), d1=times, d2=times)
def test_mix_convex_is_a_flow(x: float, z: float, t0: float, d1: float, d2: float) -> None:
    # Mixing in two legs through an intermediate time equals mixing in one leg: what lets a
    # node (or the optimizer) read the state at any time without changing the trajectory.
    mid = mix_convex(x, z, t0, t0 + d1)
    twice = mix_convex(*mid, t0 + d1, t0 + d1 + d2)
    once = mix_convex(x, z, t0, t0 + d1 + d2)
    np.testing.assert_allclose(twice, once, rtol=1e-12, atol=1e-12)


def test_mix_convex_edge_cases_and_broadcasting() -> None:
    # From t = 0 the rate 2/t is infinite: x is pulled onto z at once.
    x, z = mix_convex([3.0, -1.0], [1.0, 2.0], 0.0, 0.5)
    np.testing.assert_array_equal(x, [1.0, 2.0])
    np.testing.assert_array_equal(z, [1.0, 2.0])
    # An empty interval, including 0 -> 0, is the identity.
    assert mix_convex(3.0, 1.0, 0.0, 0.0) == (3.0, 1.0)
    assert mix_convex(3.0, 1.0, 2.0, 2.0) == (3.0, 1.0)
    # One interval per row, broadcast over the components of each row.
    xs = np.array([[1.0, 1.0], [1.0, 1.0]])
    zs = np.zeros((2, 2))
    mixed_x, mixed_z = mix_convex(xs, zs, np.array([[1.0], [1.0]]), np.array([[2.0], [4.0]]))
    np.testing.assert_allclose(mixed_x, [[0.25, 0.25], [1 / 16, 1 / 16]])
    assert mixed_z.shape == (2, 2)
