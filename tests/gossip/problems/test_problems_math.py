"""The problems' mathematics, property-based: conjugate gradients, gradients, constants, x*."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from continuized.gossip.datasets import Shard, load_shards
from continuized.gossip.problems import (
    LocalProblem,
    ProblemSet,
    make_local_problem,
    make_problem_set,
)
from continuized.gossip.problems.base import FloatArray

SPECS = ["quadratic", "ridge:0.3", "ridge:0", "logistic:0.05"]


def _shards(seed: int, n: int, dim: int, binary: bool) -> list[Shard]:
    rng = np.random.default_rng(seed)
    shards = []
    for v in range(n):
        m = int(rng.integers(dim + 1, dim + 8))  # more rows than features: ridge:0 is regular
        A = rng.normal(size=(m, dim)) * rng.uniform(0.2, 3.0)
        b = rng.integers(0, 2, size=m).astype(float) if binary else rng.normal(size=m) * 3
        shards.append(Shard.of(A, b, name=f"node {v}"))
    return shards


def _problem_set(spec: str, seed: int, n: int, dim: int) -> ProblemSet:
    if spec == "quadratic":
        values = np.random.default_rng(seed).normal(size=(n, dim)) * 3
        return make_problem_set(spec, None, values=values)
    return make_problem_set(spec, _shards(seed, n, dim, spec.startswith("logistic")))


def _conjugate_by_minimiser(f: LocalProblem, y: FloatArray) -> FloatArray:
    res = minimize(
        lambda x: f.value(x) - float(x @ y),
        np.zeros(f.dim),
        jac=lambda x: f.grad(x) - y,
        method="BFGS",
        options={"gtol": 1e-11, "maxiter": 10_000},
    )
    return np.asarray(res.x)


cases = st.tuples(
    st.sampled_from(SPECS),
    st.integers(0, 2**32 - 1),
    st.integers(1, 4),  # n
    st.integers(1, 4),  # dim
)


@settings(max_examples=60, deadline=None)
@given(cases, st.integers(0, 2**32 - 1))
def test_grad_conjugate_is_the_minimiser_of_f_minus_linear(
    case: tuple[str, int, int, int], yseed: int
) -> None:
    spec, seed, n, dim = case
    problems = _problem_set(spec, seed, n, dim)
    y = np.random.default_rng(yseed).normal(size=dim)
    for v in range(n):
        f = problems.local(v)
        got = f.grad_conjugate(y)
        want = _conjugate_by_minimiser(f, y)
        # scipy's BFGS to gtol 1e-11 on a mu-strongly convex function: |error| <= 1e-11 / mu.
        assert np.allclose(got, want, atol=1e-6 * (1 + np.abs(want).max()))
        # and the defining identity: grad f(grad f^*(y)) = y
        assert np.allclose(f.grad(got), y, atol=1e-8)


@settings(max_examples=60, deadline=None)
@given(cases, st.integers(0, 2**32 - 1))
def test_grad_matches_finite_differences(case: tuple[str, int, int, int], xseed: int) -> None:
    spec, seed, n, dim = case
    problems = _problem_set(spec, seed, n, dim)
    x = np.random.default_rng(xseed).normal(size=dim)
    h = 1e-6
    for v in range(n):
        f = problems.local(v)
        fd = np.array([(f.value(x + h * e) - f.value(x - h * e)) / (2 * h) for e in np.eye(dim)])
        assert np.allclose(f.grad(x), fd, rtol=1e-5, atol=1e-5 * (1 + abs(f.value(x))))


@settings(max_examples=60, deadline=None)
@given(cases, st.integers(0, 2**32 - 1))
def test_curvature_lies_between_mu_and_l(case: tuple[str, int, int, int], xseed: int) -> None:
    spec, seed, n, dim = case
    problems = _problem_set(spec, seed, n, dim)
    rng = np.random.default_rng(xseed)
    for v in range(n):
        f = problems.local(v)
        assert 0 < problems.mu <= f.mu <= f.L <= problems.L
        for _ in range(3):
            x, u = rng.normal(size=dim) * 3, rng.normal(size=dim)
            u /= np.linalg.norm(u)
            h = 1e-5
            curv = float((f.grad(x + h * u) - f.grad(x - h * u)) @ u) / (2 * h)
            assert f.mu * (1 - 1e-5) - 1e-7 <= curv <= f.L * (1 + 1e-5) + 1e-7


def test_logistic_l_is_attained_at_zero_margin() -> None:
    # L is tight, not just a bound: at x = 0 the logistic Hessian is A^T A / (4m) + lambda.
    shard = _shards(3, 1, 3, binary=True)[0]
    f = make_local_problem("logistic:0.1", shard)
    u = np.linalg.eigh(shard.A.T @ shard.A)[1][:, -1]
    h = 1e-6
    curv = float((f.grad(h * u) - f.grad(-h * u)) @ u) / (2 * h)
    assert curv == pytest.approx(f.L, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(cases, st.integers(0, 2**32 - 1), st.integers(1, 12))
def test_batched_calls_equal_the_per_node_ones(
    case: tuple[str, int, int, int], rseed: int, k: int
) -> None:
    spec, seed, n, dim = case
    problems = _problem_set(spec, seed, n, dim)
    rng = np.random.default_rng(rseed)
    nodes = rng.integers(0, n, size=k).astype(np.intp)  # repeats on purpose
    y = rng.normal(size=(k, dim))
    batched = problems.grad_conjugate(nodes, y)
    single = np.array(
        [problems.local(int(v)).grad_conjugate(r) for v, r in zip(nodes, y, strict=True)]
    )
    assert batched.shape == (k, dim)
    assert np.allclose(batched, single, atol=1e-9)
    grads = problems.grad(nodes, y)
    assert np.allclose(
        grads, [problems.local(int(v)).grad(r) for v, r in zip(nodes, y, strict=True)]
    )
    totals = problems.values(y)
    each = [sum(problems.local(v).value(r) for v in range(n)) for r in y]
    assert np.allclose(totals, each, rtol=1e-10, atol=1e-10)
    assert problems.value(y[0]) == pytest.approx(each[0], rel=1e-10, abs=1e-10)


@settings(max_examples=40, deadline=None)
@given(cases)
def test_x_star_has_zero_total_gradient(case: tuple[str, int, int, int]) -> None:
    spec, seed, n, dim = case
    problems = _problem_set(spec, seed, n, dim)
    star = problems.x_star()
    total = sum(problems.local(v).grad(star) for v in range(n))
    assert np.linalg.norm(total) <= 1e-9 * n * problems.L * (1 + np.linalg.norm(star))
    # and it is the minimum: any step away increases F
    step = np.random.default_rng(seed).normal(size=dim) * 1e-3
    assert problems.value(star + step) > problems.value(star)


def test_quadratic_default_is_the_one_hot_average() -> None:
    problems = make_problem_set("quadratic", None, n=5)
    assert problems.dim == 1
    assert problems.x_star().tolist() == [pytest.approx(0.2)]
    g = problems.grad_conjugate(np.array([0, 1], dtype=np.intp), np.zeros((2, 1)))
    assert g.ravel().tolist() == [1.0, 0.0]


@pytest.mark.parametrize("tol", [1e-10, 1e-6, 1e-3])
def test_newton_error_within_stated_bound(tol: float) -> None:
    """The Newton tolerance's error, measured against a 1e-14 solve: within tol / mu."""
    shards, _ = load_shards("breast-cancer", "label:0", 4)
    lam = 0.01
    loose = make_problem_set(f"logistic:{lam}", shards, tol=tol)
    exact = make_problem_set(f"logistic:{lam}", shards, tol=1e-14)
    rng = np.random.default_rng(1)
    nodes = np.repeat(np.arange(4), 16).astype(np.intp)
    y = rng.normal(size=(64, shards[0].dim)) * 0.05
    err = np.linalg.norm(loose.grad_conjugate(nodes, y) - exact.grad_conjugate(nodes, y), axis=1)
    residual = np.linalg.norm(loose.grad(nodes, loose.grad_conjugate(nodes, y)) - y, axis=1)
    assert residual.max() <= tol
    assert err.max() <= tol / lam
    print(f"tol {tol:g}: largest error {err.max():.2e}, bound tol/mu = {tol / lam:.2e}")


def test_warm_start_changes_only_the_rounding() -> None:
    shards, _ = load_shards("breast-cancer", "iid:0", 3)
    problems = make_problem_set("logistic:0.1", shards)
    nodes = np.array([0, 1, 2, 0], dtype=np.intp)
    y = np.random.default_rng(0).normal(size=(4, shards[0].dim)) * 0.1
    cold = problems.grad_conjugate(nodes, y)
    warm = problems.grad_conjugate(nodes, y * 1.01)
    guessed = problems.grad_conjugate(nodes, y * 1.01, x0=cold)
    fresh = make_problem_set("logistic:0.1", shards).grad_conjugate(nodes, y * 1.01)
    assert np.allclose(warm, fresh, atol=1e-9)
    assert np.allclose(guessed, fresh, atol=1e-9)


@pytest.mark.parametrize("spec", ["ridge:0.1", "logistic:0.1", "examples.huber_problem:make"])
def test_problem_sets_pickle(spec: str) -> None:
    # The dual simulator ships a problem set to worker processes.
    import pickle

    shards, _ = load_shards("diabetes", "iid:0", 3)
    problems = make_problem_set(spec, shards)
    copy = pickle.loads(pickle.dumps(problems))
    nodes = np.array([0, 1, 2], dtype=np.intp)
    y = np.random.default_rng(0).normal(size=(3, 10)) * 0.01
    assert np.allclose(copy.grad_conjugate(nodes, y), problems.grad_conjugate(nodes, y))
    assert copy.value(np.ones(10)) == problems.value(np.ones(10))


@pytest.mark.parametrize("scale", [0.0, 30.0, -300.0])
def test_newton_converges_from_far_guesses(scale: float) -> None:
    # Separable shards (label split) and far guesses: full Newton steps overshoot there, and
    # the safeguard (put back, line search) must still reach the tolerance.
    shards, _ = load_shards("breast-cancer", "label:0", 4)
    problems = make_problem_set("logistic:0.01", shards)
    nodes = np.repeat(np.arange(4), 8).astype(np.intp)
    rng = np.random.default_rng(2)
    y = rng.normal(size=(32, shards[0].dim)) * 0.1
    guess = np.full_like(y, scale) + rng.normal(size=y.shape) * abs(scale)
    x = problems.grad_conjugate(nodes, y, x0=guess)
    assert np.linalg.norm(problems.grad(nodes, x) - y, axis=1).max() <= problems.local(0).tol
