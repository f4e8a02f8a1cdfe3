"""The Spielman-Srivastava estimate of the effective resistances (method ``jl``): within its
stated bound of the exact values, and an over-estimate of R_max on the safe side."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError
from continuized.gossip.graph import spectral
from continuized.gossip.graph.spectral import graph_quantities, jl_dimension
from continuized.gossip.graph.topology import parse_topology


@pytest.mark.parametrize("spec", ["grid:20x25", "rgg:300:0.12:2", "line:40", "torus:9x11"])
def test_estimates_are_within_the_bound_and_r_max_is_safe(spec: str) -> None:
    topo = parse_topology(spec)
    exact = graph_quantities(topo, method="sparse")
    est = graph_quantities(topo, method="jl", eps=0.3, delta=0.01, seed=4)
    assert (est.method, est.eps, est.delta) == ("jl", 0.3, 0.01)
    assert est.mu_gossip == pytest.approx(exact.mu_gossip, rel=1e-7)  # exact, not estimated
    ratio = est.r_eff / exact.r_eff
    assert np.all(np.abs(ratio - 1.0) <= 0.3)
    # Over, never under, and by no more than (1 + eps) / (1 - eps).
    assert exact.r_max <= est.r_max <= exact.r_max * 1.3 / 0.7
    assert est.theta_arg <= exact.theta_arg
    # Foster's theorem, sum_e P_e R_eff(e) = n - 1, holds within the same relative bound.
    assert float(topo.probs @ est.r_eff) == pytest.approx(topo.n - 1, rel=0.3)
    assert est.as_dict()["eps"] == 0.3


@settings(max_examples=8, deadline=None)
@given(
    spec=st.sampled_from(["grid:5x6", "cycle:20", "er:30:0.2:7", "star:12"]),
    seed=st.integers(0, 2**31),
    eps=st.floats(0.2, 0.6),
)
def test_every_edge_within_eps_for_any_seed(spec: str, seed: int, eps: float) -> None:
    # delta = 1e-6: a failure of the bound on a single example would be a one-in-a-million event.
    topo = parse_topology(spec)
    exact = graph_quantities(topo, method="dense")
    est = graph_quantities(topo, method="jl", eps=eps, delta=1e-6, seed=seed)
    np.testing.assert_array_less(np.abs(est.r_eff / exact.r_eff - 1.0), eps)
    assert est.r_max >= exact.r_max


def test_dimension_follows_the_stated_formula() -> None:
    k = jl_dimension(1000, 0.25, 0.05)
    assert k == math.ceil(2 * math.log(2 * 1000 / 0.05) / (0.25**2 / 2 - 0.25**3 / 3))
    assert jl_dimension(2000, 0.25, 0.05) > k > jl_dimension(1000, 0.5, 0.05)
    with pytest.raises(ConfigError, match=r"eps must be in \(0, 1\), got 1.5"):
        jl_dimension(10, 1.5, 0.1)
    with pytest.raises(ConfigError, match=r"delta must be in \(0, 1\), got 0.0"):
        jl_dimension(10, 0.3, 0.0)


def test_auto_takes_the_estimate_above_the_exact_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    topo = parse_topology("grid:40x41")  # 1640 nodes > DENSE_LIMIT
    assert graph_quantities(topo).method == "sparse"
    monkeypatch.setattr(spectral, "EXACT_LIMIT", 1600)
    q = graph_quantities(topo)
    assert (q.method, q.eps, q.delta) == ("jl", 0.3, 0.01)
    again = graph_quantities(topo)
    np.testing.assert_array_equal(q.r_eff, again.r_eff)  # seeded: reproducible
