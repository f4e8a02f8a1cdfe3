"""Dual coordinate descent's parameters: re-derived constants checked against the dual itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _quadratics import QuadraticNet
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.gossip.dual.params import DualAlgorithm, dual_params, parse_dual_algorithm
from continuized.gossip.dual.steps import dgd_average, dgd_step
from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.spectral import dense_laplacian, graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.jumps import edge_flow


@pytest.mark.parametrize("spec", ["line:12", "cycle:9", "complete:7"])
def test_plain_quadratics_give_args_parameters(spec: str) -> None:
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    arg = gossip_params("arg", q.mu_gossip, q.r_max)
    p = dual_params("acd", q.mu_gossip, q.r_eff, mu=1.0, L=1.0)
    assert p.eta == pytest.approx(arg.eta, rel=1e-12)
    assert p.gamma_prime == pytest.approx(arg.c, rel=1e-12)
    assert p.theta == pytest.approx(q.theta_arg, rel=1e-12)
    # Every edge has the same R_eff here, so every step is ARG's averaging step 1/2.
    np.testing.assert_allclose(p.steps, 0.5, rtol=1e-9)


def test_rates_follow_the_condition_number() -> None:
    q = graph_quantities(parse_topology("grid:5x5"))
    acd = dual_params("acd", q.mu_gossip, q.r_eff, mu=0.5, L=8.0)
    cd = dual_params("cd", q.mu_gossip, q.r_eff, mu=0.5, L=8.0)
    assert acd.theta == pytest.approx(q.theta_arg / math.sqrt(16.0))
    assert cd.theta == pytest.approx(q.mu_gossip * q.r_eff.min() / (2 * 16.0 * q.r_max))
    # The coordinate-descent theorem's own non-accelerated rate is lower by R_min.
    assert cd.as_dict()["theta_cd_theorem"] == pytest.approx(cd.theta / q.r_eff.min())
    assert acd.mu_dual == pytest.approx(q.mu_gossip / 8.0)
    assert acd.L_dual == pytest.approx(2 * q.r_max / 0.5)
    assert (cd.eta, cd.gamma_prime) == (0.0, 0.0)
    assert acd.steps.max() <= 0.5 * acd.mu + 1e-15  # s_e = gamma R_eff <= mu / 2
    text = acd.describe()
    for word in ("theta", "mu_gossip", "kappa", "L_dual", "eta", "gamma'"):
        assert word in text


@pytest.mark.parametrize("spec", ["line:6", "grid:3x3", "star:5"])
def test_dual_constants_bound_the_true_dual(spec: str) -> None:
    """mu_dual and L_dual against the exact Hessian of h(lambda) = F^*(A lambda)."""
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    net = QuadraticNet.random(topo.n, 2, kappa=6.0, seed=3)
    p = dual_params("acd", q.mu_gossip, q.r_eff, net.mu, net.L)
    n, m, d = topo.n, topo.n_edges, 2
    a = np.zeros((n, m))
    for e, (u, v) in enumerate(topo.edges):
        a[u, e], a[v, e] = math.sqrt(topo.probs[e]), -math.sqrt(topo.probs[e])
    np.testing.assert_allclose(a @ a.T, dense_laplacian(topo), atol=1e-12)
    # Hessian of F^* is blockdiag(H_v^{-1}); kron orders the d coordinates inside each node.
    big_a = np.kron(a, np.eye(d))
    hess_f_star = np.zeros((n * d, n * d))
    for v in range(n):
        hess_f_star[v * d : (v + 1) * d, v * d : (v + 1) * d] = net.hinv[v]
    hess = big_a.T @ hess_f_star @ big_a
    proj = np.kron(a.T @ np.linalg.pinv(a @ a.T) @ a, np.eye(d))
    r_e = np.diag(a.T @ np.linalg.pinv(a @ a.T) @ a)
    np.testing.assert_allclose(r_e, topo.probs * q.r_eff, rtol=1e-9)
    # Coordinate smoothness: the block of coordinate e is bounded by L_dual P_e^2 / R_e, and
    # not loosely (the paper's P_e / (2 mu) would make L_dual 4 times too small and fail here).
    worst = max(
        np.linalg.eigvalsh(hess[e * d : (e + 1) * d, e * d : (e + 1) * d]).max()
        * r_e[e]
        / topo.probs[e] ** 2
        for e in range(m)
    )
    assert 0.5 * p.L_dual <= worst <= p.L_dual * (1 + 1e-9)
    # Strong convexity on the range of the projector: hess >= mu_dual proj.
    assert np.linalg.eigvalsh(hess - p.mu_dual * proj).min() >= -1e-9


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-1e3, 1e3), min_size=3, max_size=3),
    st.lists(st.floats(-1e3, 1e3), min_size=3, max_size=3),
    st.floats(0.0, 10.0),
    st.floats(0.0, 10.0),
)
def test_dual_flow_is_antisymmetric(
    g_v: list[float], g_w: list[float], step: float, c: float
) -> None:
    into_v = edge_flow(g_v, g_w, c=c, step=step)
    into_w = edge_flow(g_w, g_v, c=c, step=step)
    np.testing.assert_array_equal(into_v.dx, -into_w.dx)
    np.testing.assert_array_equal(into_v.dz, -into_w.dz)
    np.testing.assert_allclose(into_v.dx, step * (np.array(g_w) - np.array(g_v)), rtol=1e-12)


def test_dgd_steps() -> None:
    mid = dgd_average([1.0, 3.0], [3.0, 5.0])
    assert mid.tolist() == [2.0, 4.0]
    assert dgd_step(mid, [1.0, -1.0], 0.5).tolist() == [1.5, 4.5]


def test_dgd_params_default_to_one_over_l() -> None:
    p = dual_params("dgd", 0.1, np.array([1.0, 2.0]), mu=1.0, L=4.0)
    assert p.algorithm is DualAlgorithm.DGD
    assert (p.alpha, p.theta, p.eta) == (0.25, 0.0, 0.0)
    assert p.as_dict()["alpha"] == 0.25
    assert "alpha" in p.describe()


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"algorithm": "nesterov"}, ["'nesterov'", "acd, cd, dgd"]),
        ({"mu": 2.0, "L": 1.0}, ["mu=2.0", "L=1.0"]),
        ({"mu": 0.0}, ["0 < mu <= L"]),
        ({"mu_gossip": -1.0}, ["mu_gossip", "-1.0"]),
        ({"r_eff": np.array([1.0, np.nan])}, ["r_eff"]),
        ({"algorithm": "dgd", "alpha": -0.1}, ["alpha", "-0.1"]),
    ],
)
def test_bad_parameters_are_named(kwargs: dict[str, object], words: list[str]) -> None:
    args: dict[str, object] = {
        "algorithm": "acd",
        "mu_gossip": 0.1,
        "r_eff": np.array([1.0, 2.0]),
        "mu": 1.0,
        "L": 2.0,
    }
    args.update(kwargs)
    with pytest.raises(ConfigError) as err:
        dual_params(**args)  # type: ignore[arg-type]
    for word in words:
        assert word in str(err.value)


def test_algorithm_names() -> None:
    assert parse_dual_algorithm(" ACD ") is DualAlgorithm.ACD
