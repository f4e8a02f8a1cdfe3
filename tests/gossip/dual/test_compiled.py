"""The compiled optimization sweep against the numpy engine: same activations, same curves."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import continuized.gossip.dual.compiled as compiled
from continuized.gossip.datasets import load_shards
from continuized.gossip.dual.baseline import best_dgd_params
from continuized.gossip.dual.experiment import algorithm_params
from continuized.gossip.dual.params import dual_params
from continuized.gossip.dual.simulate import simulate_optimization
from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import Topology, parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.problems import ListProblemSet, LogisticSet, make_problem_set
from continuized.gossip.problems.arrays import NewtonConjugate
from continuized.gossip.sim.simulator import simulate

pytestmark = pytest.mark.skipif(
    not compiled.dual_kernel_available(), reason="numba is not installed (numpy engine only)"
)


def _both(
    topo: Topology, problems: Any, algorithm: str, grid: Any, runs: int, seed: int, **kw: Any
) -> Any:
    params = algorithm_params(algorithm, graph_quantities(topo), problems)
    fast = simulate_optimization(topo, problems, params, grid, runs, seed, engine="compiled", **kw)
    slow = simulate_optimization(topo, problems, params, grid, runs, seed, engine="numpy", **kw)
    assert (fast.engine, slow.engine) == ("compiled", "numpy")
    return fast, slow


def _problems(spec: str, topo: Topology, seed: int, dim: int) -> Any:
    """Random quadratics (``dim``), or ``spec`` on breast-cancer's iid shards."""
    if spec == "quadratic":
        values = np.random.default_rng(seed).normal(size=(topo.n, dim))
        return make_problem_set(spec, None, n=topo.n, values=values)
    return make_problem_set(spec, load_shards("breast-cancer", "iid:0", topo.n)[0])


def _close(fast: Any, slow: Any, rel: float) -> None:
    """Distances (square roots of the errors) within ``rel`` of the starting distance."""
    scale = np.sqrt(slow.errors[:, :1]) + 1e-300
    for name in ("errors", "consensus"):
        a, b = np.sqrt(getattr(fast, name)), np.sqrt(getattr(slow, name))
        assert np.abs(a - b).max() <= rel * scale.max(), name
    # A gap is a difference of objective values: rounding of F itself, near F*, where the mean
    # is exact (the quadratic conserves it) and the gap is 0.
    atol = rel * (abs(slow.f_star) + slow.gaps[:, 0].max())
    np.testing.assert_allclose(fast.gaps, slow.gaps, rtol=rel * 100, atol=atol)


@pytest.mark.parametrize("algorithm", ["acd", "cd"])
@pytest.mark.parametrize("estimate", ["y", "z"])
@pytest.mark.parametrize("spec", ["quadratic", "ridge:0.1"])
def test_affine_problems_give_the_numpy_engines_curves(
    algorithm: str, estimate: str, spec: str
) -> None:
    topo = parse_topology("grid:3x4")
    problems = _problems(spec, topo, seed=3, dim=3)
    grid = np.linspace(0.0, 2500.0, 26)  # crosses two window ends (CHUNK_T = 1024)
    fast, slow = _both(topo, problems, algorithm, grid, 5, 7, estimate=estimate)
    assert fast.errors[:, -1].max() < 0.5 * fast.errors[:, 0].min()  # it did move
    _close(fast, slow, 1e-10)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32), t_end=st.floats(10.0, 3000.0), runs=st.integers(1, 4))
def test_any_seed_and_horizon_give_the_same_curves(seed: int, t_end: float, runs: int) -> None:
    topo = parse_topology("line:7")
    values = np.random.default_rng(seed % 97).normal(size=(topo.n, 2))
    problems = make_problem_set("quadratic", None, n=topo.n, values=values)
    fast, slow = _both(topo, problems, "acd", np.linspace(0.0, t_end, 9), runs, seed)
    _close(fast, slow, 1e-10)


@pytest.mark.parametrize("spec", ["line:10", "cycle:8"])
def test_plain_quadratics_are_arg_jump_for_jump(spec: str) -> None:
    # The compiled sweep draws the gossip simulator's activations: acd on f_v = |x - b_v|^2 / 2
    # (equal effective resistances) is ARG, whose error is half of ours.
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    values = np.random.default_rng(5).normal(size=(topo.n, 2)) * 10.0
    grid = np.linspace(0.0, 2500.0, 26)
    reference = simulate(topo, gossip_params("arg", q.mu_gossip, q.r_max), values, grid, 6, 11)
    problems = make_problem_set("quadratic", None, n=topo.n, values=values)
    params = algorithm_params("acd", q, problems)
    ours = simulate_optimization(topo, problems, params, grid, 6, 11, engine="compiled")
    np.testing.assert_allclose(ours.errors, 2.0 * reference.errors, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("algorithm", ["acd", "cd"])
def test_logistic_agrees_to_newtons_tolerance(algorithm: str) -> None:
    # Both engines stop Newton at |grad f(x) - y| <= tol = 1e-10, so two answers differ by up
    # to tol / mu = 1e-8: the curves agree to about that, not to rounding.
    topo = parse_topology("line:8")
    problems = make_problem_set("logistic:0.01", load_shards("breast-cancer", "iid:0", topo.n)[0])
    fast, slow = _both(topo, problems, algorithm, np.linspace(0.0, 1500.0, 7), 3, 2)
    assert fast.errors[:, -1].max() < fast.errors[:, 0].min()
    _close(fast, slow, 1e-7)


@pytest.mark.parametrize(
    ("spec", "rel"), [("quadratic", 1e-10), ("ridge:0.1", 1e-10), ("logistic:0.01", 1e-7)]
)
def test_dgd_gives_the_numpy_engines_curves(spec: str, rel: float) -> None:
    # dgd's gradient steps from the local minimisers (logistic's solved by Newton, to tol).
    topo = parse_topology("grid:3x3")
    problems = _problems(spec, topo, seed=8, dim=2)
    q = graph_quantities(topo)
    # A quarter of 1/L (at 1/L the quadratics' x_v would stay at their b_v).
    params = dual_params(
        "dgd", q.mu_gossip, q.r_eff, problems.mu, problems.L, alpha=0.25 / problems.L
    )
    grid = np.linspace(0.0, 1500.0, 16)
    fast = simulate_optimization(topo, problems, params, grid, 3, 9, engine="compiled")
    slow = simulate_optimization(topo, problems, params, grid, 3, 9, engine="numpy")
    assert fast.errors[:, -1].max() < 0.5 * fast.errors[:, 0].min()  # it did move
    _close(fast, slow, rel)


def test_dgd_step_search_sweeps_each_candidate_with_its_own_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topo = parse_topology("line:6")
    problems = make_problem_set("ridge:0.1", load_shards("breast-cancer", "iid:0", topo.n)[0])
    base = algorithm_params("dgd", graph_quantities(topo), problems)
    chosen, scores = best_dgd_params(topo, problems, base, 800.0, 3, candidates=4)
    monkeypatch.setenv("GOSSIP_SIM_ENGINE", "numpy")
    again, reference = best_dgd_params(topo, problems, base, 800.0, 3, candidates=4)
    assert chosen.alpha == again.alpha
    assert scores.keys() == reference.keys()
    for key, score in scores.items():
        assert score == pytest.approx(reference[key], rel=1e-9)
    assert len(set(scores.values())) == 4  # four steps, four different outcomes


def test_threads_change_nothing() -> None:
    topo = parse_topology("grid:3x3")
    problems = make_problem_set("logistic:0.01", load_shards("breast-cancer", "iid:0", topo.n)[0])
    params = algorithm_params("acd", graph_quantities(topo), problems)
    grid = np.linspace(0.0, 600.0, 5)
    one = simulate_optimization(topo, problems, params, grid, 6, 4, workers=1)
    two = simulate_optimization(topo, problems, params, grid, 6, 4, workers=2)
    assert one.engine == two.engine == "compiled"
    np.testing.assert_array_equal(one.errors, two.errors)
    np.testing.assert_array_equal(one.consensus, two.consensus)
    # F of the means, computed block by block: BLAS may sum blocks of other sizes otherwise.
    np.testing.assert_allclose(one.gaps, two.gaps, rtol=0.0, atol=1e-14 * (1.0 + abs(one.f_star)))


class _ShortNewton(LogisticSet):
    """Logistic whose compiled Newton may take no step: every answer but a lucky one stalls."""

    def conjugate_arrays(self) -> NewtonConjugate:
        arrays = super().conjugate_arrays()
        return NewtonConjugate(arrays.As, arrays.norms, arrays.inv_m, arrays.lam, arrays.tol, 0, 40)


def test_a_stalled_newton_hands_the_block_to_the_numpy_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topo = parse_topology("line:5")
    shards = load_shards("breast-cancer", "iid:0", topo.n)[0]
    problems = _ShortNewton(shards, 0.01)
    swept: list[int] = []
    numpy_sweep = compiled.run_dual_block

    def counting(spec: Any, report: Any = None) -> Any:
        swept.append(spec.n_runs)
        return numpy_sweep(spec, report)

    monkeypatch.setattr(compiled, "run_dual_block", counting)
    reports: list[int] = []
    params = algorithm_params("acd", graph_quantities(topo), problems)
    grid = np.linspace(0.0, 300.0, 4)
    result = simulate_optimization(topo, problems, params, grid, 2, 0, reports.append)
    assert swept == [2]  # the whole block, once
    reference = simulate_optimization(
        topo, LogisticSet(shards, 0.01), params, grid, 2, 0, engine="numpy"
    )
    _close(result, reference, 1e-7)
    assert reports
    assert reports[-1] >= 2 * 290  # the numpy sweep's activations were reported


def test_a_stall_in_a_later_group_leaves_the_groups_before_it_swept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One run per kernel call; the second call stalls: runs 1.. go to numpy, run 0 stays.
    kernel = compiled._load()
    assert kernel is not None
    calls: list[int] = []

    def stalling(*args: Any) -> int:
        calls.append(args[1])
        return -1 if len(calls) == 2 else kernel(*args)

    swept: list[list[int]] = []
    numpy_sweep = compiled.run_dual_block

    def counting(spec: Any, report: Any = None) -> Any:
        swept.append(spec.runs.tolist())
        return numpy_sweep(spec, report)

    monkeypatch.setattr(compiled, "_load", lambda: stalling)
    monkeypatch.setattr(compiled, "AFFINE_EVENTS_PER_CALL", 1)
    monkeypatch.setattr(compiled, "run_dual_block", counting)
    topo = parse_topology("line:6")
    problems = make_problem_set("ridge:0.1", load_shards("breast-cancer", "iid:0", topo.n)[0])
    params = algorithm_params("cd", graph_quantities(topo), problems)
    grid = np.linspace(0.0, 500.0, 6)
    reports: list[int] = []
    mixed = simulate_optimization(topo, problems, params, grid, 4, 5, reports.append)
    assert calls == [0, 1]
    assert swept == [[1, 2, 3]]
    assert mixed.engine == "compiled"
    reference: list[int] = []
    slow = simulate_optimization(
        topo, problems, params, grid, 4, 5, reference.append, engine="numpy"
    )
    _close(mixed, slow, 1e-10)
    # Progress is cumulative: every activation counted once, run 0's before the others'.
    assert reports[-1] == reference[-1]
    assert len(reports) > 1
    assert reports == sorted(reports)


def test_which_engine_runs_and_why_not(monkeypatch: pytest.MonkeyPatch) -> None:
    topo = parse_topology("line:4")
    problems = make_problem_set("quadratic", None, n=topo.n)
    q = graph_quantities(topo)
    grid = [0.0, 10.0]
    dgd = algorithm_params("dgd", q, problems)
    acd = algorithm_params("acd", q, problems)
    assert simulate_optimization(topo, problems, acd, grid, 1, 0).engine == "compiled"
    assert simulate_optimization(topo, problems, dgd, grid, 1, 0).engine == "compiled"
    # A user's problems (no plain arrays) are swept by numpy.
    users = ListProblemSet([problems.local(v) for v in range(topo.n)])
    assert simulate_optimization(topo, users, dgd, grid, 1, 0).engine == "numpy"
    with pytest.raises(ConfigError, match=r"built-in problems.*this is dgd on ListProblemSet"):
        simulate_optimization(topo, users, dgd, grid, 1, 0, engine="compiled")
    with pytest.raises(
        ConfigError, match=r"engine must be one of auto, compiled, numpy, got 'fast'"
    ):
        simulate_optimization(topo, problems, acd, grid, 1, 0, engine="fast")
    monkeypatch.setenv("GOSSIP_SIM_ENGINE", "numpy")
    assert simulate_optimization(topo, problems, acd, grid, 1, 0).engine == "numpy"
    with pytest.raises(ConfigError, match=r"needs numba"):
        simulate_optimization(topo, problems, acd, grid, 1, 0, engine="compiled")


def test_whether_the_first_sweep_compiles_its_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    topo = parse_topology("line:4")
    problems = make_problem_set("quadratic", None, n=topo.n)
    acd = algorithm_params("acd", graph_quantities(topo), problems)
    simulate_optimization(topo, problems, acd, [0.0, 10.0], 1, 0, engine="compiled")
    assert not compiled.dual_kernel_compiles()  # compiled (or loaded) by the sweep just run
    # Asked of the sweep's own kernel (the probe: tests/gossip/sim/test_simulator_cache.py).
    kernel = compiled._load()
    monkeypatch.setattr(compiled, "compiles_first", lambda asked: asked is kernel)
    assert compiled.dual_kernel_compiles()
    monkeypatch.setenv("GOSSIP_SIM_ENGINE", "numpy")  # no compiled sweep: nothing compiles
    assert not compiled.dual_kernel_compiles()
