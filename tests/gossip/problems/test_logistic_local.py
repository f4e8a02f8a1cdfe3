"""One node's logistic ``grad f^*`` (the live hot path) against the batched solver.

Every test runs on both paths of the node's solver: compiled (numba) and numpy
(``GOSSIP_SOLVER=numpy``, the path where numba is missing).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import continuized.gossip.problems.logistic as logistic
from continuized.gossip.datasets import Shard, load_node_shard
from continuized.gossip.errors import ConfigError
from continuized.gossip.problems import make_local_problem
from continuized.gossip.problems.compiled_newton import compiled_solver


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def solver(request: pytest.FixtureRequest) -> Iterator[str]:
    """The node's solver path the test's problems are built with."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "numpy":
            patch.setenv("GOSSIP_SOLVER", "numpy")
        else:
            patch.delenv("GOSSIP_SOLVER", raising=False)
            if compiled_solver() is None:
                pytest.skip("numba is not installed")
        yield request.param


def _random_shard(seed: int, m: int, d: int, scale: float) -> Shard:
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(m, d)) * scale
    return Shard.of(A, rng.integers(0, 2, size=m).astype(float), name="node")


walks = st.tuples(
    st.integers(0, 2**32 - 1),  # data seed
    st.integers(1, 12),  # d
    st.floats(0.05, 3.0),  # feature scale
    st.sampled_from([1e-6, 1e-3, 1e-1]),  # size of the moves of y
    st.sampled_from([0.01, 0.1, 1.0]),  # lambda
)


@settings(max_examples=40, deadline=None)
@given(walks)
def test_every_answer_has_its_residual_within_tol(
    walk: tuple[int, int, float, float, float],
) -> None:
    # The fast path returns some answers without evaluating their residual (the step bound
    # certifies it): check the guarantee |grad f(x) - y| <= tol on every answer of a walk in y,
    # and that the answers are the batched solver's up to tol / mu.
    seed, d, scale, move, lam = walk
    shard = _random_shard(seed, d + 5, d, scale)
    fast = make_local_problem(f"logistic:{lam}", shard)
    rng = np.random.default_rng(seed + 1)
    y = np.zeros(d)
    x_batched = np.zeros((1, d))
    for _ in range(15):
        y = y + rng.normal(size=d) * move
        x = fast.grad_conjugate(y)
        assert np.linalg.norm(fast.grad(x) - y) <= fast.tol
        x_batched = logistic.newton_conjugate(
            shard.A[None], fast.s[None], fast._w, lam, y[None], x_batched, fast.tol
        )
        assert np.linalg.norm(x - x_batched[0]) <= 2 * fast.tol / lam


def test_the_step_bound_is_an_upper_bound_of_the_residual() -> None:
    # The bound that lets the fast path skip the last residual: PHI3/(2m) sum |a_i| (a_i^T p)^2
    # after a full Newton step p; measured along real steps on a real shard.
    shard = load_node_shard("breast-cancer", "label:1", 16, 5)
    lam = 0.01
    f = make_local_problem(f"logistic:{lam}", shard)
    solver = f._fast
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(30):
        y = rng.normal(size=shard.dim) * 0.05
        x = rng.normal(size=shard.dim) * 0.5
        for _ in range(6):
            g = f.grad(x) - y
            t = solver.As @ x
            h = np.exp(-np.logaddexp(0, t) - np.logaddexp(0, -t)) / shard.m
            p = np.linalg.solve((solver.As.T * h) @ solver.As + lam * np.eye(shard.dim), g)
            bound = float(solver.norms @ (solver.As @ p) ** 2)
            x = x - p
            after = float(np.linalg.norm(f.grad(x) - y))
            if after > 1e-13:  # below that the residual is rounding, not the step's remainder
                assert after <= bound * (1 + 1e-9)
                checked += 1
    assert checked >= 30


def test_a_stalled_step_falls_back_to_the_line_search() -> None:
    # Far from the answer on a separable shard a full Newton step overshoots: the fast path
    # gives up (None) and the safeguarded batched solver still reaches tol.
    shard = load_node_shard("breast-cancer", "label:0", 4, 0)
    f = make_local_problem("logistic:0.01", shard)
    y = np.random.default_rng(2).normal(size=shard.dim) * 0.1
    assert f._fast.solve(y, np.full(shard.dim, 300.0)) is None
    f._warm[0] = 300.0
    x = f.grad_conjugate(y)
    assert np.linalg.norm(f.grad(x) - y) <= f.tol


@pytest.mark.parametrize("lam", [0.01, 1.0])
def test_the_first_order_correction_saves_newton_steps(lam: float) -> None:
    # A slow walk in y (as a live node sees it): starting from the correction given by the
    # kept Cholesky factor takes fewer full Newton steps than starting from the last answer.
    shard = load_node_shard("breast-cancer", "label:1", 16, 5)
    steps = []
    for corrected in (True, False):
        f = make_local_problem(f"logistic:{lam}", shard)
        rng = np.random.default_rng(3)
        y = np.zeros(shard.dim)
        for _ in range(200):
            y = y + rng.normal(size=shard.dim) * 1e-4
            if not corrected:
                f._fast.forget()  # as if no factor were kept: plain warm start
            x = f.grad_conjugate(y)
            assert np.linalg.norm(f.grad(x) - y) <= f.tol
        steps.append(f._fast.newton_steps)
    assert steps[0] < 0.75 * steps[1]


def test_the_switch_selects_the_numpy_path(solver: str) -> None:
    shard = load_node_shard("breast-cancer", "label:1", 16, 5)
    kind = type(make_local_problem("logistic:0.01", shard)._fast).__name__
    assert kind == ("_LocalNewton" if solver == "numpy" else "CompiledNewton")


def test_a_y_of_the_wrong_shape_is_refused_by_name() -> None:
    # The compiled kernel does not check its bounds: the shape is checked before it runs.
    f = make_local_problem("logistic:0.01", load_node_shard("breast-cancer", "label:1", 16, 5))
    with pytest.raises(ConfigError, match=r"y must have shape \(30,\), got \(29,\)"):
        f.grad_conjugate(np.zeros(29))
