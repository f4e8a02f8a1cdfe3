"""The closed-form mixing: against a numerical ODE solver, as a flow, and its invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

from continuized.gossip.model.mixing import decay, mix

values = st.floats(-1e3, 1e3, allow_nan=False)
rates = st.floats(0.0, 2.0)
times = st.floats(0.0, 20.0)


@settings(max_examples=60, deadline=None)
@given(x=values, z=values, eta=rates, tau=times)
def test_closed_form_matches_solve_ivp(x: float, z: float, eta: float, tau: float) -> None:
    def rhs(_: float, y: np.ndarray) -> list[float]:
        return [eta * (y[1] - y[0]), eta * (y[0] - y[1])]

    sol = solve_ivp(rhs, (0.0, tau), [x, z], method="DOP853", rtol=1e-11, atol=1e-9)
    mx, mz = mix(x, z, eta, tau)
    assert float(mx) == pytest.approx(sol.y[0, -1], rel=1e-8, abs=1e-7)
    assert float(mz) == pytest.approx(sol.y[1, -1], rel=1e-8, abs=1e-7)


@settings(deadline=None)
@given(x=values, z=values, eta=rates, t1=times, t2=times)
def test_mixing_is_a_flow_and_conserves_the_sum(
    x: float, z: float, eta: float, t1: float, t2: float
) -> None:
    x1, z1 = mix(x, z, eta, t1)
    x2, z2 = mix(x1, z1, eta, t2)
    x3, z3 = mix(x, z, eta, t1 + t2)
    assert float(x2) == pytest.approx(float(x3), rel=1e-9, abs=1e-9)
    assert float(z2) == pytest.approx(float(z3), rel=1e-9, abs=1e-9)
    assert float(x2 + z2) == pytest.approx(x + z, rel=1e-12, abs=1e-9)
    # Running the flow backwards undoes it; backwards it amplifies rounding by exp(2 eta t1).
    xb, zb = mix(x1, z1, eta, -t1)
    tol = 1e-13 * np.exp(2 * eta * t1) * (1.0 + abs(x) + abs(z))
    assert float(xb) == pytest.approx(x, abs=tol)
    assert float(zb) == pytest.approx(z, abs=tol)


def test_mix_broadcasts_over_nodes_runs_and_components() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5, 3))
    z = rng.standard_normal((4, 5, 3))
    tau = rng.random((4, 5, 1))
    mx, mz = mix(x, z, 0.3, tau)
    assert mx.shape == (4, 5, 3)
    for r in range(4):
        for v in range(5):
            ex, ez = mix(x[r, v], z[r, v], 0.3, float(tau[r, v, 0]))
            np.testing.assert_allclose(mx[r, v], ex)
            np.testing.assert_allclose(mz[r, v], ez)


def test_no_mixing_when_eta_is_zero_and_full_mixing_at_infinity() -> None:
    assert [float(a) for a in mix(1.0, 0.0, 0.0, 100.0)] == [1.0, 0.0]
    assert [float(a) for a in mix(1.0, 0.0, 1.0, np.inf)] == [0.5, 0.5]
    assert float(decay(0.5, 2.0)) == pytest.approx(np.exp(-2.0))
