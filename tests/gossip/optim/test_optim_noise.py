"""Stochastic gradient oracles and the least-squares constants R^2 and kappa~."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg

from continuized.gossip.errors import ConfigError
from continuized.gossip.optim import (
    AdditiveNoise,
    CoordinateSampling,
    continuized_nesterov,
    gradient_descent,
    noise_constants,
    noiseless_regression,
)


def test_additive_noise_statistics() -> None:
    rng = np.random.default_rng(0)
    oracle = AdditiveNoise(lambda x: 2.0 * x, cov=1e-2)
    x = np.ones((20000, 3))
    g = oracle(x, rng)
    np.testing.assert_allclose(g.mean(axis=0), 2.0, atol=5e-3)
    np.testing.assert_allclose(np.cov(g.T), 1e-2 * np.eye(3), atol=5e-4)
    assert oracle.variance(3) == pytest.approx(3e-2)
    cov = np.array([[2e-2, 1e-2], [1e-2, 2e-2]])
    g = AdditiveNoise(lambda x: np.zeros_like(x), cov)(np.zeros((20000, 2)), rng)
    np.testing.assert_allclose(np.cov(g.T), cov, atol=1e-3)
    assert AdditiveNoise(lambda x: x, cov).variance(2) == pytest.approx(4e-2)


@pytest.mark.parametrize(
    ("cov", "message"),
    [
        (-1.0, "noise variance must be a finite number >= 0"),
        (np.array([[1.0, 2.0], [0.0, 1.0]]), "finite symmetric"),
        (np.array([[1.0, 0.0], [0.0, -1.0]]), "positive semi-definite"),
        (np.ones(3), "a number or a (d, d) matrix"),
    ],
)
def test_additive_noise_bad_covariance(cov: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        AdditiveNoise(lambda x: x, cov)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_coordinate_sampling_is_unbiased_and_noiseless() -> None:
    rng = np.random.default_rng(1)
    oracle = CoordinateSampling(lambda x: x - 1.0)
    x = np.tile([2.0, 0.0, 4.0], (30000, 1))
    g = oracle(x, rng)
    assert np.all(np.count_nonzero(g, axis=1) == 1)  # one coordinate per row
    np.testing.assert_allclose(g.mean(axis=0), [1.0, -1.0, 3.0], atol=0.1)
    np.testing.assert_array_equal(oracle(np.ones((5, 3)), rng), 0.0)  # zero at the optimum


def test_noise_constants_match_their_definitions() -> None:
    problem = noiseless_regression(n_samples=300, dim=4, seed=2)
    c = problem.constants()
    a = problem.a
    n = a.shape[0]
    H = a.T @ a / n
    M_R = (a * np.sum(a * a, axis=1)[:, None]).T @ a / n
    Hinv = np.linalg.inv(H)
    M_k = (a * np.einsum("ij,jk,ik->i", a, Hinv, a)[:, None]).T @ a / n
    # Smallest constants with M <= c H: M - c H is negative semi-definite with a zero eigenvalue.
    for M, value in ((M_R, c.R2), (M_k, c.kappa_tilde)):
        top = scipy.linalg.eigvalsh(M - value * H)[-1]
        assert abs(top) < 1e-9 * value
        assert scipy.linalg.eigvalsh(M - 0.99 * value * H)[-1] > 0
    assert c.mu == pytest.approx(np.linalg.eigvalsh(H)[0])
    # d <= kappa~ <= kappa (paper, section 5).
    assert 4 - 1e-9 <= c.kappa_tilde <= c.kappa
    assert c.gamma == pytest.approx(1 / c.R2)
    assert c.eta == pytest.approx(1 / math.sqrt(c.kappa * c.kappa_tilde))
    assert c.gamma_prime == pytest.approx(math.sqrt(c.kappa / c.kappa_tilde) / c.R2)


def test_noise_constants_closed_forms() -> None:
    # Coordinate sampling in R^d: a = e_i, i uniform: H = I/d, R^2 = 1, kappa~ = d, mu = 1/d.
    c = noise_constants(np.eye(5))
    assert (c.R2, c.kappa_tilde, c.mu) == pytest.approx((1.0, 5.0, 0.2))
    # Weights change the law: a = e_1 with probability 0.9 raises kappa~ to 1 / 0.1.
    c = noise_constants(np.eye(2), weights=[0.9, 0.1])
    assert c.kappa_tilde == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("a", "message"),
    [
        (np.ones((3, 2)), "H = E[a a^T] is singular"),
        (np.ones(3), "a must be a finite 2-D array"),
        (np.array([[np.nan, 1.0]]), "a must be a finite 2-D array"),
    ],
)
def test_noise_constants_bad_data(a: np.ndarray, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        noise_constants(a)
    assert message in str(info.value)


def test_accelerated_sgd_on_a_noiseless_regression() -> None:
    # Theorem 4 (pure multiplicative noise): with L = R^2, kappa_tilde = kappa~,
    # E[exp(T_k / sqrt(kappa kappa~)) (1/2 |x_k - x*|^2 + mu/2 |z_k - x*|^2_{H^-1})] <= its start,
    # and it beats SGD with step 1/R^2, whose rate is only 1 / kappa.
    problem = noiseless_regression(n_samples=200, dim=5, seed=0)
    c = problem.constants()
    x_star = problem.x_star
    x0 = np.zeros(5)
    runs, n = 2000, 400
    res = continuized_nesterov(
        problem.oracle(),
        x0,
        L=c.R2,
        mu=c.mu,
        kappa_tilde=c.kappa_tilde,
        n_steps=n,
        seed=1,
        runs=runs,
    )
    H = problem.a.T @ problem.a / problem.a.shape[0]
    dx = res.history["x"] - x_star
    dz = res.history["z"] - x_star
    lyap = 0.5 * np.sum(dx * dx, axis=-1) + 0.5 * c.mu * np.einsum(
        "rki,ij,rkj->rk", dz, np.linalg.inv(H), dz
    )
    weighted = np.exp(res.history["T"] * c.eta) * lyap
    mean = weighted.mean(axis=0)
    stderr = weighted.std(axis=0) / math.sqrt(runs)
    assert np.all(mean <= lyap[0, 0] * (1 + 1e-12) + 4 * stderr)

    sgd = gradient_descent(problem.oracle(), x0, c.R2, n, seed=1, runs=runs)
    err_acc = np.mean(np.sum((res.x - x_star) ** 2, axis=-1))
    err_sgd = np.mean(np.sum((sgd.x - x_star) ** 2, axis=-1))
    assert err_acc < err_sgd / 10


@pytest.mark.parametrize("spec", ["line:12", "grid:4x4", "complete:6"])
def test_gossip_is_least_squares_with_multiplicative_noise(spec: str) -> None:
    # Randomized gossip is SGD on f(x) = E[<x, e_v - e_w>^2] / 2, edges drawn with P_e (paper,
    # section 6): H = L_P, R^2 = 2, kappa~ <= R_max, mu = mu_gossip on the complement of the
    # constants. Theorem 4's parameters then are ARG's: eta = theta_ARG and gamma' = c.
    from continuized.gossip.graph.spectral import graph_quantities
    from continuized.gossip.graph.topology import parse_topology
    from continuized.gossip.model.algorithms import gossip_params

    topo = parse_topology(spec, weighted=False)
    q = graph_quantities(topo)
    n = topo.n
    a = np.zeros((topo.n_edges, n))
    a[np.arange(topo.n_edges), topo.edges[:, 0]] = 1.0
    a[np.arange(topo.n_edges), topo.edges[:, 1]] = -1.0
    # Coordinates in the complement of the constant vector, where H is invertible.
    basis = np.linalg.svd(np.eye(n) - 1.0 / n)[0][:, : n - 1]
    c = noise_constants(a @ basis, weights=topo.probs)
    assert abs(c.R2 - 2.0) < 1e-9
    assert c.mu == pytest.approx(q.mu_gossip)
    assert c.kappa_tilde <= q.r_max * (1 + 1e-9)
    # The paper takes kappa~ = R_max (an upper bound): with it the constants are ARG's.
    arg = gossip_params("arg", q.mu_gossip, q.r_max)
    bound = type(c)(R2=2.0, kappa_tilde=q.r_max, mu=q.mu_gossip)
    assert bound.eta == pytest.approx(arg.eta)
    assert bound.gamma_prime == pytest.approx(arg.c)
