"""The event-driven simulator: exact against a dense reference, reproducible, checked inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import Topology, parse_topology
from continuized.gossip.model.algorithms import GossipParams, gossip_params
from continuized.gossip.model.values import initial_values
from continuized.gossip.sim import events
from continuized.gossip.sim.events import (
    CHUNK_T,
    EdgeSampler,
    chunk_bounds,
    draw_chunk,
    run_generator,
)
from continuized.gossip.sim.simulator import SimulationResult, simulate


def _params(topo: Topology, algorithm: str) -> GossipParams:
    q = graph_quantities(topo)
    return gossip_params(algorithm, q.mu_gossip, q.r_max)


def _events_of_run(
    topo: Topology, seed: int, run: int, t_end: float
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """The activations (times, edges) of one run up to t_end, as the simulator draws them."""
    gen = [run_generator(seed, run)]
    sweep = np.unique(np.append(np.arange(1, np.ceil(t_end / CHUNK_T)) * CHUNK_T, t_end))
    times, edges = [], []
    for i0, i1, start in chunk_bounds(sweep):
        chunk = draw_chunk(gen, start, sweep[i0:i1], EdgeSampler.from_probs(topo.probs))
        real = chunk.edges[:, 0] < topo.n_edges
        times.append(chunk.times[real, 0])
        edges.append(chunk.edges[real, 0])
    return np.concatenate(times), np.concatenate(edges)


def _dense_reference(
    topo: Topology,
    params: GossipParams,
    initial: NDArray[np.float64],
    times: NDArray[np.float64],
    edges: NDArray[np.int64],
    grid: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Every node mixed at every event by the ODE's matrix exponential; the SPEC's jump written out.

    The exponential of the symmetric generator comes from its numerical eigendecomposition,
    independently of the closed form in gossip.model.mixing.
    """
    x = initial.astype(np.float64).copy()
    z = x.copy()
    generator = params.eta * np.array([[-1.0, 1.0], [1.0, -1.0]])
    lam, vec = np.linalg.eigh(generator)
    mean = initial.mean(axis=0)
    now = 0.0
    out = []

    # One check that the eigendecomposition is the matrix exponential.
    np.testing.assert_allclose(
        (vec * np.exp(lam * 3.0)) @ vec.T, scipy.linalg.expm(3.0 * generator), atol=1e-12
    )

    def advance(t: float) -> None:
        nonlocal x, z, now
        flow = (vec * np.exp(lam * (t - now))) @ vec.T
        x, z = flow[0, 0] * x + flow[0, 1] * z, flow[1, 0] * x + flow[1, 1] * z
        now = t

    k = 0
    for g in grid:
        while k < len(times) and times[k] <= g:
            advance(float(times[k]))
            v, w = topo.edges[edges[k]]
            xv, xw = x[v].copy(), x[w].copy()
            x[v] = x[w] = (xv + xw) / 2
            z[v] = z[v] + params.c * (xw - xv)
            z[w] = z[w] + params.c * (xv - xw)
            k += 1
        advance(float(g))
        out.append(0.5 * np.sum((x - mean) ** 2))
    return np.array(out)


@pytest.mark.parametrize(
    ("graph", "algorithm", "dim"),
    [("line:8", "arg", 1), ("grid:3x4", "arg", 2), ("cycle:6", "rg", 1), ("star:5", "arg", 3)],
)
def test_simulator_matches_dense_reference_exactly(graph: str, algorithm: str, dim: int) -> None:
    topo = parse_topology(graph)
    params = _params(topo, algorithm)
    initial = initial_values("gaussian:3", topo.n, dim=dim)
    grid = np.array([0.0, 3.0, 40.0, 333.3, 1500.0, 2600.0])
    result = simulate(topo, params, initial, grid, runs=3, seed=11, workers=1)
    for run in range(3):
        times, edges = _events_of_run(topo, 11, run, float(grid[-1]))
        expected = _dense_reference(topo, params, initial, times, edges, grid)
        np.testing.assert_allclose(result.errors[run], expected, rtol=1e-8, atol=1e-12)


def test_result_shapes_and_statistics() -> None:
    topo = parse_topology("line:10")
    initial = initial_values("onehot", 10)
    grid = np.linspace(0.0, 200.0, 11)
    result = simulate(topo, _params(topo, "arg"), initial, grid, runs=40, seed=1)
    assert isinstance(result, SimulationResult)
    assert result.errors.shape == (40, 11)
    assert result.runs == 40
    np.testing.assert_array_equal(result.t_grid, grid)
    assert result.initial_error == pytest.approx(0.45)
    np.testing.assert_allclose(result.errors[:, 0], 0.45)
    np.testing.assert_allclose(result.mean(), result.errors.mean(axis=0))
    np.testing.assert_allclose(result.median(), np.median(result.errors, axis=0))
    assert np.all(result.quantile(0.05) <= result.quantile(0.95))
    assert result.bound()[0] == pytest.approx(2 * 0.45)
    with pytest.raises(ConfigError, match="quantile"):
        result.quantile(1.5)


def test_same_seed_same_runs_whatever_the_grid_and_run_count() -> None:
    topo = parse_topology("grid:4x4")
    params = _params(topo, "arg")
    initial = initial_values("onehot", 16)
    fine = np.linspace(0.0, 3000.0, 31)
    a = simulate(topo, params, initial, fine, runs=12, seed=5, workers=1)
    b = simulate(topo, params, initial, fine[::3], runs=5, seed=5, workers=1)
    np.testing.assert_array_equal(a.errors[:5, ::3], b.errors)
    c = simulate(topo, params, initial, fine, runs=12, seed=6, workers=1)
    assert not np.array_equal(a.errors[:, 1:], c.errors[:, 1:])


def test_progress_reports_every_activation() -> None:
    topo = parse_topology("line:5")
    seen: list[int] = []
    simulate(
        topo,
        _params(topo, "rg"),
        initial_values("onehot", 5),
        np.array([5000.0]),
        20,
        2,
        progress=seen.append,
    )
    assert seen == sorted(seen)
    # 20 runs of a rate-1 Poisson process over 5000 t: 1e5 activations, sd about 316.
    assert abs(seen[-1] - 100_000) < 2_000


def test_activations_are_poisson_with_edge_probabilities(tmp_path: Path) -> None:
    edges = tmp_path / "weighted.txt"
    edges.write_text("0 1 1\n1 2 3\n2 3 0.5\n0 3 2\n1 3 1.5\n")
    topo = parse_topology(f"file:{edges}", weighted=True)
    gens = [run_generator(0, r) for r in range(200)]
    ends = np.array([CHUNK_T])
    chunk = draw_chunk(gens, 0.0, ends, EdgeSampler.from_probs(topo.probs))
    real = chunk.edges < topo.n_edges
    counts = real.sum(axis=0)
    assert abs(counts.mean() - CHUNK_T) < 4 * np.sqrt(CHUNK_T / 200)
    assert abs(counts.var() / CHUNK_T - 1.0) < 0.3
    freq = np.bincount(chunk.edges[real], minlength=topo.n_edges) / real.sum()
    np.testing.assert_allclose(freq, topo.probs, atol=0.01)
    # Times increase within a run; the idle rows after a run's last activation sit at the end.
    assert np.all(np.diff(chunk.times, axis=0) >= 0)
    assert np.all(chunk.times[~real] == CHUNK_T)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"initial": np.zeros(4)}, "shape (4,)"),
        ({"initial": np.array([0.0, np.nan, 0.0, 0.0, 0.0])}, "finite"),
        ({"t_grid": np.array([2.0, 1.0])}, "sorted"),
        ({"t_grid": np.array([-1.0])}, ">= 0"),
        ({"t_grid": np.zeros((2, 2))}, "1-D"),
        ({"runs": 0}, "runs must be"),
        ({"seed": -1}, "seed must be"),
        ({"workers": 0}, "workers must be"),
    ],
)
def test_bad_arguments_raise_config_error(kwargs: dict[str, object], needle: str) -> None:
    topo = parse_topology("line:5")
    args: dict[str, object] = {
        "initial": initial_values("onehot", 5),
        "t_grid": np.array([0.0, 1.0]),
        "runs": 2,
        "seed": 0,
    }
    args.update(kwargs)
    with pytest.raises(ConfigError) as info:
        simulate(topo, _params(topo, "rg"), **args)  # type: ignore[arg-type]
    assert needle in str(info.value)


def test_windows_longer_than_the_first_batch_of_gaps(monkeypatch: pytest.MonkeyPatch) -> None:
    # Normally the first batch of gaps covers the window but in ~1e-15 of the cases; shrink it so
    # that every window needs the top-up path, and check the process is still Poisson(1).
    monkeypatch.setattr(events, "_SPARE_SD", -30.0)
    topo = parse_topology("cycle:5")
    gens = [run_generator(1, r) for r in range(300)]
    chunk = draw_chunk(gens, CHUNK_T, np.array([2 * CHUNK_T]), EdgeSampler.from_probs(topo.probs))
    real = chunk.edges < topo.n_edges
    counts = real.sum(axis=0)
    assert abs(counts.mean() - CHUNK_T) < 4 * np.sqrt(CHUNK_T / 300)
    assert abs(counts.var() / CHUNK_T - 1.0) < 0.3
    assert np.all(chunk.times[real] >= CHUNK_T)
    assert np.all(chunk.times[real] < 2 * CHUNK_T)
    assert np.all(np.diff(chunk.times, axis=0) >= 0)


def test_alias_table_carries_exactly_the_edge_probabilities() -> None:
    probs = np.random.default_rng(3).random(37) ** 3
    probs /= probs.sum()
    table = EdgeSampler.from_probs(probs)
    n = len(probs)
    mass = table.accept / n + np.bincount(table.alias, weights=(1 - table.accept) / n, minlength=n)
    np.testing.assert_allclose(mass, probs, rtol=1e-12, atol=1e-15)
    drawn = table.sample(np.random.default_rng(4).random(200_000))
    freq = np.bincount(drawn, minlength=n) / drawn.size
    np.testing.assert_allclose(freq, probs, atol=4 * np.sqrt(probs.max() / drawn.size))


def test_vector_values_are_independent_scalar_problems() -> None:
    # The components share the activations, and the error is a sum over components.
    topo = parse_topology("grid:3x3")
    params = _params(topo, "arg")
    initial = initial_values("uniform:9", 9, dim=3)
    grid = np.linspace(0.0, 600.0, 13)
    vector = simulate(topo, params, initial, grid, runs=6, seed=2, workers=1)
    parts = [simulate(topo, params, initial[:, k], grid, 6, 2, workers=1) for k in range(3)]
    # Equal down to the rounding floor of a sum of squares (about 1e-31 here).
    np.testing.assert_allclose(vector.errors, sum(p.errors for p in parts), rtol=1e-9, atol=1e-26)
    assert vector.initial_error == pytest.approx(sum(p.initial_error for p in parts))


def _within_bound(result: SimulationResult, bound: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Mean <= bound up to Monte Carlo error (4 standard errors), where the bound is resolvable."""
    mean = result.mean()
    stderr = result.errors.std(axis=0) / np.sqrt(result.runs)
    ok = mean <= bound * (1 + 1e-9) + 4 * stderr
    return np.asarray(ok | (bound < 1e-12 * result.initial_error))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("graph", "t_end"),
    [("line:16", 4000.0), ("grid:6x6", 8000.0), ("complete:8", 150.0), ("star:8", 400.0)],
)
@pytest.mark.parametrize("algorithm", ["rg", "arg"])
@pytest.mark.parametrize("values", ["onehot", "gaussian:1"])
def test_mean_error_stays_under_the_theorems_bound(
    graph: str, t_end: float, algorithm: str, values: str
) -> None:
    topo = parse_topology(graph)
    params = _params(topo, algorithm)
    initial = initial_values(values, topo.n)
    result = simulate(topo, params, initial, np.linspace(0.0, t_end, 41), 400, 17)
    # bound(): factor * e0 * exp(-theta t); factor 2 and theta_ARG for ARG, 1 and mu / 2 for RG.
    assert np.all(_within_bound(result, result.bound()))
    # ... and the error did go down by orders of magnitude, so the check was not vacuous.
    assert result.mean()[-1] < 1e-4 * result.initial_error


@pytest.mark.slow
def test_rg_bound_is_tight_on_the_complete_graph() -> None:
    # On the complete graph E[error] = e0 exp(-mu t / 2) exactly, so a bound at the paper's
    # quoted rate theta_RG = mu would be crossed: this is why params uses mu / 2.
    topo = parse_topology("complete:8")
    q = graph_quantities(topo)
    params = _params(topo, "rg")
    assert params.theta == pytest.approx(q.mu_gossip / 2)
    grid = np.linspace(0.0, 60.0, 7)
    result = simulate(topo, params, initial_values("gaussian:4", 8), grid, 4000, 3)
    np.testing.assert_allclose(result.mean(), result.bound(), rtol=0.15)
    too_fast = result.initial_error * np.exp(-q.mu_gossip * grid)
    assert not np.all(_within_bound(result, too_fast))


@pytest.mark.slow
@pytest.mark.parametrize(("graph", "t_end"), [("line:30", 6000.0), ("grid:15x15", 12000.0)])
def test_arg_beats_rg_on_lines_and_grids(graph: str, t_end: float) -> None:
    topo = parse_topology(graph)
    initial = initial_values("onehot", topo.n)
    grid = np.linspace(0.0, t_end, 25)
    rg = simulate(topo, _params(topo, "rg"), initial, grid, 100, 8)
    arg = simulate(topo, _params(topo, "arg"), initial, grid, 100, 8)
    # At the end the bands are apart: the worst ARG runs beat the best RG runs by far.
    assert arg.quantile(0.95)[-1] < 0.05 * rg.quantile(0.05)[-1]
    assert arg.mean()[-1] < 0.02 * rg.mean()[-1]
    # ARG's median gets 1000 times smaller within the horizon; RG's does not.
    target = 1e-3 * arg.initial_error
    arg_hit = np.flatnonzero(arg.median() <= target)
    assert arg_hit.size > 0
    assert arg_hit[0] < len(grid) - 1
    assert np.all(rg.median() > target)


@pytest.mark.slow
def test_results_do_not_depend_on_the_number_of_workers() -> None:
    topo = parse_topology("cycle:10")
    params = _params(topo, "arg")
    initial = initial_values("gaussian:0", 10)
    grid = np.linspace(0.0, 2500.0, 11)
    seen: list[int] = []
    two = simulate(topo, params, initial, grid, 9, 4, seen.append, workers=2)
    one = simulate(topo, params, initial, grid, 9, 4, workers=1)
    np.testing.assert_array_equal(two.errors, one.errors)
    assert seen == sorted(seen)
    assert abs(seen[-1] - 9 * 2500) < 5 * np.sqrt(9 * 2500)


# The compiled kernel (gossip.sim.compiled) against the NumPy engine (gossip.sim.engine): the
# same process from the same streams, so the same curves up to rounding.


def _assert_same_runs(
    got: NDArray[np.float64], want: NDArray[np.float64], initial: NDArray[np.float64]
) -> None:
    """The runs' distances to the mean, sqrt(2 error), agree to the rounding of the values.

    The kernel keeps ARG's pair as (x + z, rebased x - z), the NumPy engine as (x, z): the same
    trajectory with different roundings, 1e-16 of the values' size per operation. A relative
    tolerance on the error would not do: near the float floor the error is the square of a
    rounding. A missed, extra or misplaced activation moves a distance by far more.
    """
    values = np.asarray(initial, dtype=np.float64)
    scale = float(np.abs(values).max()) * np.sqrt(values.size)
    np.testing.assert_allclose(np.sqrt(2 * got), np.sqrt(2 * want), rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("graph", ["line:30", "grid:6x7"])
@pytest.mark.parametrize("algorithm", ["rg", "arg"])
@pytest.mark.parametrize("dim", [1, 3])
def test_compiled_kernel_gives_the_numpy_engines_curves(
    graph: str, algorithm: str, dim: int
) -> None:
    topo = parse_topology(graph)
    params = _params(topo, algorithm)
    initial = (
        initial_values("onehot", topo.n)
        if dim == 1
        else initial_values("gaussian:2", topo.n, dim=dim)
    )
    # Points inside windows, on a window end, and past several windows.
    grid = np.array([0.0, 1.5, 700.0, CHUNK_T, 2500.0, 5000.0, 5000.0, 9000.25])
    numpy_run = simulate(topo, params, initial, grid, 7, 13, workers=1, engine="numpy")
    compiled = simulate(topo, params, initial, grid, 7, 13, workers=1, engine="compiled")
    assert (numpy_run.engine, compiled.engine) == ("numpy", "compiled")
    _assert_same_runs(compiled.errors, numpy_run.errors, initial)
    assert np.all(compiled.errors[:, -1] < compiled.errors[:, 0])  # it did gossip


@settings(max_examples=12, deadline=None)
@given(
    graph=st.sampled_from(["line:5", "cycle:7", "star:6", "complete:4", "grid:3x3"]),
    algorithm=st.sampled_from(["rg", "arg"]),
    seed=st.integers(0, 2**32),
    runs=st.integers(1, 4),
    t_end=st.floats(0.0, 3000.0),
)
def test_engines_agree_for_any_seed_and_horizon(
    graph: str, algorithm: str, seed: int, runs: int, t_end: float
) -> None:
    topo = parse_topology(graph)
    params = _params(topo, algorithm)
    initial = initial_values("gaussian:1", topo.n)
    grid = np.linspace(0.0, t_end, 5)
    a = simulate(topo, params, initial, grid, runs, seed, workers=1, engine="numpy")
    b = simulate(topo, params, initial, grid, runs, seed, workers=1, engine="compiled")
    _assert_same_runs(b.errors, a.errors, initial)


def test_compiled_threads_report_progress_and_match_one_thread() -> None:
    topo = parse_topology("grid:4x4")
    params = _params(topo, "arg")
    initial = initial_values("onehot", topo.n)
    grid = np.linspace(0.0, 3 * CHUNK_T * 16 + 10.0, 9)  # more than one kernel call per run
    seen: list[int] = []
    two = simulate(topo, params, initial, grid, 6, 3, seen.append, workers=2, engine="compiled")
    one = simulate(topo, params, initial, grid, 6, 3, workers=1, engine="compiled")
    np.testing.assert_array_equal(two.errors, one.errors)
    assert seen == sorted(seen)
    expected = 6 * grid[-1]
    assert abs(seen[-1] - expected) < 5 * np.sqrt(expected)


def test_environment_turns_the_compiled_kernel_off(monkeypatch: pytest.MonkeyPatch) -> None:
    topo = parse_topology("line:6")
    initial = initial_values("onehot", 6)
    grid = np.array([0.0, 50.0])
    monkeypatch.setenv("GOSSIP_SIM_ENGINE", "numpy")
    assert simulate(topo, _params(topo, "arg"), initial, grid, 2, 1).engine == "numpy"
    with pytest.raises(ConfigError, match="pip install numba"):
        simulate(topo, _params(topo, "arg"), initial, grid, 2, 1, engine="compiled")
    monkeypatch.delenv("GOSSIP_SIM_ENGINE")
    assert simulate(topo, _params(topo, "arg"), initial, grid, 2, 1).engine == "compiled"
    with pytest.raises(ConfigError, match="engine must be one of auto, compiled, numpy"):
        simulate(topo, _params(topo, "arg"), initial, grid, 2, 1, engine="fast")  # type: ignore[arg-type]


_NO_NUMBA = """
import importlib.abc, json, sys

class NoNumba(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "numba" or name.startswith("numba."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None

sys.meta_path.insert(0, NoNumba())
import numpy as np
from continuized.gossip.errors import ConfigError
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.sim.simulator import simulate
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.values import initial_values

topo = parse_topology("grid:3x4")
params = gossip_params("arg", 0.01, 12.0)
result = simulate(topo, params, initial_values("onehot", 12), [0.0, 30.0, 1500.0], 3, 9)
try:
    simulate(topo, params, initial_values("onehot", 12), [0.0, 30.0], 1, 9, engine="compiled")
    refused = ""
except ConfigError as exc:
    refused = str(exc)
print(json.dumps({"engine": result.engine, "errors": result.errors.tolist(), "refused": refused,
                  "numba_loaded": sorted(m for m in sys.modules if m.split(".")[0] == "numba")}))
"""


def test_without_numba_the_numpy_engine_runs_the_same_simulation() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _NO_NUMBA], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["engine"] == "numpy"
    assert got["numba_loaded"] == []
    assert "pip install numba" in got["refused"]
    topo = parse_topology("grid:3x4")
    params = gossip_params("arg", 0.01, 12.0)
    here = simulate(topo, params, initial_values("onehot", 12), [0.0, 30.0, 1500.0], 3, 9)
    assert here.engine == "compiled"
    _assert_same_runs(np.array(got["errors"]), here.errors, initial_values("onehot", 12))
