"""The live logistic node's compiled solver against its numpy path, and its refusals."""

from __future__ import annotations

import numpy as np
import pytest

import continuized.gossip.problems.logistic as logistic
from continuized.gossip.datasets import load_node_shard
from continuized.gossip.problems import make_local_problem
from continuized.gossip.problems.compiled_newton import compiled_solver

pytestmark = pytest.mark.skipif(
    compiled_solver() is None, reason="numba is not installed (the numpy path is tested alone)"
)


def test_the_compiled_path_is_the_numpy_path_step_for_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The same walk through both: the same Newton steps (up to rounding at the threshold),
    # answers equal up to rounding.
    monkeypatch.delenv("GOSSIP_SOLVER", raising=False)
    shard = load_node_shard("breast-cancer", "label:1", 16, 5)
    compiled = make_local_problem("logistic:0.01", shard)
    plain = make_local_problem("logistic:0.01", shard)
    plain._fast = logistic._LocalNewton(shard.A, plain.s, plain.lam, plain.tol)
    assert type(compiled._fast).__name__ == "CompiledNewton"
    rng = np.random.default_rng(4)
    y = np.zeros(shard.dim)
    for k in range(300):
        y = y + rng.normal(size=shard.dim) * (0.05 if k % 50 == 0 else 1e-3)
        a, b = compiled.grad_conjugate(y), plain.grad_conjugate(y)
        assert np.linalg.norm(a - b) <= 1e-12 * (1.0 + np.linalg.norm(b))
    # Where a residual or a step's bound lands within rounding of the threshold, one path may
    # take one more step than the other (measured: 622 against 628 here).
    steps = compiled._fast.newton_steps, plain._fast.newton_steps
    assert min(steps) > 300
    assert abs(steps[0] - steps[1]) <= 0.02 * steps[1]


def test_the_switch_turns_the_compiled_solver_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOSSIP_SOLVER", "numpy")
    assert compiled_solver() is None
    monkeypatch.setenv("GOSSIP_SOLVER", "")
    assert compiled_solver() is not None


def test_a_hessian_that_is_not_positive_definite_is_refused() -> None:
    from continuized.gossip.problems.newton_kernel import _cholesky

    good = np.array([[4.0, 2.0], [2.0, 3.0]])
    assert _cholesky(good)
    np.testing.assert_allclose(np.tril(good) @ np.tril(good).T, [[4.0, 2.0], [2.0, 3.0]])
    assert not _cholesky(np.array([[1.0, 2.0], [2.0, 1.0]]))
    assert not _cholesky(np.array([[np.nan, 0.0], [0.0, 1.0]]))


def test_newton_that_runs_out_of_steps_hands_the_problem_back() -> None:
    # From far away a step limit of 1 cannot reach tol: -1, and the caller (Logistic) then
    # solves with the safeguarded batched solver.
    kernel = compiled_solver()
    assert kernel is not None
    shard = load_node_shard("breast-cancer", "label:1", 16, 5)
    f = make_local_problem("logistic:0.01", shard)
    solver = f._fast
    y = np.full(shard.dim, 0.05)
    x = np.zeros(shard.dim)
    chol, y_prev = np.zeros((shard.dim, shard.dim)), np.zeros(shard.dim)
    args = (solver.As, solver.norms, solver.lam, solver.inv_m, solver.tol, y, x, chol, y_prev)
    assert kernel(*args, False, 1) == -1
    x[:] = 0.0
    steps = kernel(*args, False, 100)
    assert 3 <= steps < 100
    assert np.linalg.norm(f.grad(x) - y) <= f.tol
    assert np.array_equal(y_prev, y)  # kept for the next call's first-order correction


def test_an_answer_that_took_no_step_keeps_no_factor_it_never_had() -> None:
    # A first answer whose start is already within tol takes no Newton step, so no Hessian was
    # factored: the next answer must not correct with the factor's empty buffer (it divided
    # by zero), but solve like the numpy path, which keeps no factor either.
    shard = load_node_shard("breast-cancer", "iid:0", 30, 5)
    answer = make_local_problem("logistic:0.01", shard).grad_conjugate(np.zeros(shard.dim))
    compiled = make_local_problem("logistic:0.01", shard)
    plain = make_local_problem("logistic:0.01", shard)
    plain._fast = logistic._LocalNewton(shard.A, plain.s, plain.lam, plain.tol)
    for f in (compiled, plain):
        f._warm[0] = answer
        np.testing.assert_array_equal(f.grad_conjugate(np.zeros(shard.dim)), answer)
    assert compiled._fast.newton_steps == plain._fast.newton_steps == 0
    for y in (np.full(shard.dim, 1e-3), np.full(shard.dim, 2e-3)):
        a, b = compiled.grad_conjugate(y), plain.grad_conjugate(y)
        assert np.linalg.norm(compiled.grad(a) - y) <= compiled.tol
        assert np.linalg.norm(a - b) <= 1e-12 * (1.0 + np.linalg.norm(b))


@pytest.mark.parametrize("scale", [0.05, 0.3, 3.0])
def test_the_careful_answer_converges_where_full_steps_stall(scale: float) -> None:
    # From 0 to a y far away, full Newton steps overshoot (-1 beyond the smallest scale); with
    # its line search the careful answer reaches tol, and leaves the factor and y for the next.
    from continuized.gossip.problems.newton_kernel import careful_answer, newton_answer

    shard = load_node_shard("breast-cancer", "label:1", 16, 5)
    f = make_local_problem("logistic:0.01", shard)
    s, d = f._fast, shard.dim
    y = np.random.default_rng(0).normal(size=d) * scale
    chol, y_prev = np.zeros((d, d)), np.zeros(d)
    plain = newton_answer(
        s.As, s.norms, s.lam, s.inv_m, s.tol, y, np.zeros(d), chol, y_prev, False, 100
    )
    assert (plain > 0) == (scale < 0.1)
    x = np.zeros(d)
    steps = careful_answer(s.As, s.lam, s.inv_m, s.tol, y, x, chol, y_prev, 100, 40)
    assert 0 < steps < 100
    assert np.linalg.norm(f.grad(x) - y) <= f.tol
    assert np.array_equal(y_prev, y)
    assert careful_answer(s.As, s.lam, s.inv_m, s.tol, y, np.zeros(d), chol, y_prev, 2, 40) == -1
