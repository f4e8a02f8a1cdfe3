"""The optimization simulator: ARG jump for jump on plain quadratics, conservation, rates."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from _quadratics import QuadraticNet
from numpy.typing import NDArray

import continuized.gossip.dual.simulate as simulate_module
from continuized.gossip.dual.baseline import SEARCH_RUNS, SEARCH_SEED_OFFSET, best_dgd_params
from continuized.gossip.dual.compiled import dual_kernel_available
from continuized.gossip.dual.engine import DualBlockSpec, run_dual_block
from continuized.gossip.dual.experiment import algorithm_params
from continuized.gossip.dual.params import DualParams, dual_params
from continuized.gossip.dual.result import t_eps
from continuized.gossip.dual.simulate import simulate_optimization, sweep_grid
from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import Topology, parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.problems import make_problem_set
from continuized.gossip.sim.simulator import simulate
from continuized.gossip.sim.sweep import THREADED_EVENTS


def _params(topo: Topology, algorithm: str, net: QuadraticNet) -> DualParams:
    q = graph_quantities(topo)
    return dual_params(algorithm, q.mu_gossip, q.r_eff, net.mu, net.L)


@pytest.mark.parametrize("spec", ["line:10", "cycle:8", "complete:6"])
@pytest.mark.parametrize(("dual", "gossip"), [("acd", "arg"), ("cd", "rg")])
def test_plain_quadratics_reproduce_gossip_jump_for_jump(spec: str, dual: str, gossip: str) -> None:
    """Same seed, same activations: acd is ARG and cd is RG, whose error is half of ours."""
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    values = np.random.default_rng(5).normal(size=(topo.n, 2)) * 10.0
    grid = np.linspace(0.0, 2500.0, 26)  # crosses two window ends (CHUNK_T = 1024)
    reference = simulate(
        topo, gossip_params(gossip, q.mu_gossip, q.r_max), values, grid, 6, 11, workers=1
    )
    net = QuadraticNet.plain(values)
    ours = simulate_optimization(topo, net, _params(topo, dual, net), grid, 6, 11)
    np.testing.assert_allclose(ours.errors, 2.0 * reference.errors, rtol=1e-9, atol=1e-9)
    assert ours.errors[:, 0] == pytest.approx(2.0 * reference.initial_error)
    # On the complete graph ARG is RG, and so is acd: no acceleration there.
    assert ours.errors[:, -1].max() < 1e-6 * ours.errors[0, 0]


def _inspect_sums(topo: Topology, net: QuadraticNet, params: DualParams) -> list[float]:
    """Run one block and return |sum_v y_v|, |sum_v z_v| at every recorded time, all runs."""
    sweep, record = sweep_grid(np.linspace(0.0, 3000.0, 31))
    spec = DualBlockSpec(
        edges=topo.edges,
        probs=topo.probs,
        problems=net,
        params=params,
        x_star=net.x_star(),
        f_star=net.value(net.x_star()),
        grid=sweep,
        record=record,
        seed=2,
        runs=np.arange(8),
    )
    sums: list[float] = []

    def inspect(t: float, y: NDArray[np.float64], z: NDArray[np.float64]) -> None:
        sums.extend(np.abs(y.sum(axis=1)).ravel().tolist())
        sums.extend(np.abs(z.sum(axis=1)).ravel().tolist())

    curves = run_dual_block(spec, inspect=inspect)
    assert len(sums) == 2 * 31 * 8 * net.dim
    assert curves.errors[:, -1].max() < curves.errors[:, 0].min()  # it did move
    return sums


@pytest.mark.parametrize("algorithm", ["acd", "cd"])
@pytest.mark.parametrize("spec", ["grid:4x4", "star:7"])
def test_dual_sums_stay_zero(algorithm: str, spec: str) -> None:
    topo = parse_topology(spec)
    net = QuadraticNet.random(topo.n, 3, kappa=5.0, seed=1)
    assert max(_inspect_sums(topo, net, _params(topo, algorithm, net))) < 1e-9


def test_runs_do_not_depend_on_blocks_or_workers() -> None:
    topo = parse_topology("grid:3x3")
    net = QuadraticNet.random(topo.n, 2, kappa=3.0, seed=4)
    params = _params(topo, "acd", net)
    grid = np.linspace(0.0, 1500.0, 7)
    alone = simulate_optimization(topo, net, params, grid, 3, 9)
    many = simulate_optimization(topo, net, params, grid, 5, 9, workers=2)
    np.testing.assert_allclose(many.errors[:3], alone.errors, rtol=1e-12, atol=0)
    np.testing.assert_allclose(many.gaps[:3], alone.gaps, rtol=1e-9, atol=1e-15)


def test_no_workers_given_means_threads_for_a_large_compiled_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not dual_kernel_available():
        pytest.skip("numba is not installed (numpy engine only)")
    threads: list[int] = []
    real = simulate_module.run_blocks_in_threads

    def counting(run: Any, specs: Any, workers: int, progress: Any) -> Any:
        threads.append(workers)
        return real(run, specs, workers, progress)

    monkeypatch.setattr(simulate_module, "run_blocks_in_threads", counting)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    topo = parse_topology("line:6")
    values = np.random.default_rng(4).normal(size=(topo.n, 2))
    net = make_problem_set("quadratic", None, n=topo.n, values=values)  # built-in: compiled
    params = algorithm_params("cd", graph_quantities(topo), net)
    small = simulate_optimization(topo, net, params, [0.0, 100.0], 4, 1, workers=None)
    assert threads == []  # 400 activations: one thread, this one
    big_t = 2.0 * THREADED_EVENTS / 4
    big = simulate_optimization(topo, net, params, [0.0, big_t], 4, 1, workers=None)
    assert threads == [2]
    alone = simulate_optimization(topo, net, params, [0.0, big_t], 4, 1)
    np.testing.assert_array_equal(big.errors, alone.errors)
    assert small.errors.shape == (4, 2)
    # The numpy sweep does not start processes unasked.
    numpy = simulate_optimization(
        topo, net, params, [0.0, big_t / 100], 2, 1, workers=None, engine="numpy"
    )
    assert numpy.engine == "numpy"


def test_curves_measure_what_they_say() -> None:
    topo = parse_topology("line:5")
    net = QuadraticNet.random(topo.n, 2, kappa=4.0, seed=8)
    result = simulate_optimization(topo, net, _params(topo, "acd", net), [0.0], 2, 0)
    # At t = 0 every node holds its own minimiser b_v.
    local = net.bs
    assert result.errors[0, 0] == pytest.approx(np.sum((local - net.x_star()) ** 2))
    mean = local.mean(axis=0)
    assert result.consensus[0, 0] == pytest.approx(np.sum((local - mean) ** 2))
    assert result.gaps[0, 0] == pytest.approx(net.value(mean) - net.value(net.x_star()))


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["line:20", "grid:5x5"])
def test_acd_stays_under_the_theorems_bound_and_beats_cd(spec: str) -> None:
    topo = parse_topology(spec)
    net = QuadraticNet.random(topo.n, 2, kappa=10.0, seed=6)
    acd_p, cd_p = _params(topo, "acd", net), _params(topo, "cd", net)
    t_end = 12.0 / acd_p.theta
    grid = np.linspace(0.0, t_end, 25)
    acd = simulate_optimization(topo, net, acd_p, grid, 200, 1)
    cd = simulate_optimization(topo, net, cd_p, grid, 200, 1)
    # The bound is on the expectation: the mean of 200 runs, with 25% Monte Carlo slack.
    assert np.all(acd.mean() <= 1.25 * acd.bound())
    assert np.all(cd.mean() <= 1.25 * cd.bound())
    eps = 1e-6 * acd.errors[0, 0]
    acd_hit = t_eps(acd, eps)
    assert acd_hit is not None
    cd_hit = t_eps(cd, eps)
    assert cd_hit is None or cd_hit > 2.0 * acd_hit
    assert np.median(cd.errors[:, -1]) > 100.0 * np.median(acd.errors[:, -1])


def test_y_gives_a_better_primal_estimate_than_z() -> None:
    topo = parse_topology("line:12")
    net = QuadraticNet.random(topo.n, 2, kappa=20.0, seed=2)
    params = _params(topo, "acd", net)
    grid = np.linspace(0.0, 4.0 / params.theta, 9)[1:]
    from_y = simulate_optimization(topo, net, params, grid, 20, 3, estimate="y")
    from_z = simulate_optimization(topo, net, params, grid, 20, 3, estimate="z")
    assert np.all(from_y.median() < from_z.median())


def test_dgd_step_search_and_its_bias() -> None:
    topo = parse_topology("cycle:6")
    net = QuadraticNet.random(topo.n, 2, kappa=4.0, seed=5)
    base = _params(topo, "acd", net)
    dgd, scores = best_dgd_params(topo, net, base, t_end=3000.0, seed=0)
    assert len(scores) == 10
    assert dgd.alpha == pytest.approx(float(min(scores, key=lambda a: scores[a])))
    result = simulate_optimization(topo, net, dgd, np.linspace(0, 3000.0, 4), 4, 0)
    # It improves on the start, but a constant step leaves a bias that acd does not have.
    assert np.all(result.errors[:, -1] < result.errors[:, 0])
    acd = simulate_optimization(topo, net, base, np.linspace(0, 3000.0, 4), 4, 0)
    assert np.median(acd.errors[:, -1]) < np.median(result.errors[:, -1])


def test_the_one_block_search_scores_each_step_as_its_own_simulation() -> None:
    topo = parse_topology("line:5")
    net = QuadraticNet.random(topo.n, 2, kappa=3.0, seed=7)
    base = _params(topo, "cd", net)
    _, scores = best_dgd_params(topo, net, base, t_end=800.0, seed=4, candidates=3, ratio=4.0)
    assert len(scores) == 3
    for alpha, score in scores.items():
        alone = simulate_optimization(
            topo,
            net,
            dual_params("dgd", base.mu_gossip, np.ones(4), net.mu, net.L, alpha=float(alpha)),
            [0.0, 800.0],
            SEARCH_RUNS,
            4 + SEARCH_SEED_OFFSET,
        )
        assert score == pytest.approx(float(np.median(alone.errors[:, -1])), rel=1e-12)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"runs": 0}, ["runs", "0"]),
        ({"seed": -1}, ["seed", "-1"]),
        ({"workers": 0}, ["workers", "0"]),
        ({"estimate": "x"}, ["estimate", "'x'"]),
        ({"t_grid": [2.0, 1.0]}, ["sorted"]),
        ({"t_grid": [-1.0]}, [">= 0"]),
    ],
)
def test_bad_arguments_are_named(change: dict[str, object], words: list[str]) -> None:
    topo = parse_topology("line:4")
    net = QuadraticNet.plain(np.eye(4)[:, :2])
    args: dict[str, object] = {
        "topology": topo,
        "problems": net,
        "params": _params(topo, "acd", net),
        "t_grid": [0.0, 1.0],
        "runs": 1,
        "seed": 0,
    }
    args.update(change)
    with pytest.raises(ConfigError) as err:
        simulate_optimization(**args)  # type: ignore[arg-type]
    for word in words:
        assert word in str(err.value)


def test_a_problem_per_node() -> None:
    topo = parse_topology("line:4")
    net = QuadraticNet.plain(np.eye(3))
    with pytest.raises(ConfigError, match=r"3 nodes.*'line:4' has 4"):
        simulate_optimization(topo, net, _params(parse_topology("line:3"), "acd", net), [0.0], 1, 0)


class _WarmQuadratics(QuadraticNet):
    """The same quadratics, with a solver that takes (and must get) a warm start x0."""

    calls = 0

    def grad_conjugate(
        self,
        nodes: NDArray[np.intp],
        y: NDArray[np.float64],
        x0: NDArray[np.float64] | None = None,
    ) -> NDArray[np.float64]:
        answer = super().grad_conjugate(nodes, y)
        if x0 is not None:
            assert x0.shape == answer.shape
            type(self).calls += 1
        return answer


def test_warm_starts_change_nothing_but_reach_the_solver() -> None:
    topo = parse_topology("grid:3x3")
    plain = QuadraticNet.random(topo.n, 2, kappa=3.0, seed=2)
    warm = _WarmQuadratics(plain.hs, plain.bs)
    params = _params(topo, "acd", plain)
    grid = np.linspace(0.0, 600.0, 4)
    ours = simulate_optimization(topo, warm, params, grid, 3, 1)
    assert _WarmQuadratics.calls > 500
    np.testing.assert_array_equal(
        ours.errors, simulate_optimization(topo, plain, params, grid, 3, 1).errors
    )
