"""The event-driven simulation: the event model's rates, seeds, learning, consensus speed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.train import (
    METRICS,
    EventClock,
    TrainingProblem,
    make_problem,
    node_initial,
    node_stream,
    run_once,
    run_training,
)
from continuized.gossip.train.clocks import GRADIENT, clock_stream, init_stream


def test_event_rates_follow_the_model() -> None:
    topo = parse_topology("star:5")  # not regular: edges fire by P_e, not by degree
    clock = EventClock(topo.n, topo.edges, topo.probs, rate_com=2.0)
    t_end = 2000.0
    events = list(clock.events(clock_stream(3), t_end))
    grads = np.array([i for _, kind, i, _ in events if kind == GRADIENT])
    comms = [(i, j) for _, kind, i, j in events if kind != GRADIENT]
    times = np.array([t for t, *_ in events])
    assert np.all(np.diff(times) > 0)
    assert times[-1] <= t_end
    # Poisson counts: mean = rate * t_end, sd = sqrt(mean); allow 5 sd.
    for count, rate in [(len(grads), topo.n), (len(comms), topo.n * 2.0 / 2)]:
        assert abs(count - rate * t_end) < 5 * np.sqrt(rate * t_end)
    per_node = np.bincount(grads, minlength=topo.n)
    assert np.all(np.abs(per_node - t_end) < 5 * np.sqrt(t_end))
    assert all(topo.edge_index(i, j) >= 0 for i, j in comms)


def test_node_streams_are_per_node_and_reproducible() -> None:
    assert node_stream(1, 2).integers(1 << 30) == node_stream(1, 2).integers(1 << 30)
    assert node_stream(1, 2).integers(1 << 30) != node_stream(1, 3).integers(1 << 30)
    assert node_stream(1, 2, run=0).integers(1 << 30) != node_stream(1, 2, run=1).integers(1 << 30)


@pytest.fixture(scope="module")
def iris_cycle() -> TrainingProblem:
    return make_problem("cycle:6", "softmax", "iris", "iid:0", lr=0.2, momentum=0.5)


def test_same_seed_same_run(iris_cycle: TrainingProblem) -> None:
    grid = np.linspace(0, 20, 5)
    one = run_once(iris_cycle, "a2cid2", grid, seed=4)
    two = run_once(iris_cycle, "a2cid2", grid, seed=4)
    other = run_once(iris_cycle, "a2cid2", grid, seed=5)
    assert one.shape == (len(METRICS), 5)
    assert np.array_equal(one, two)
    assert not np.array_equal(one, other)


def test_training_learns_and_communication_agrees(iris_cycle: TrainingProblem) -> None:
    grid = np.linspace(0, 40, 9)
    results = run_training(iris_cycle, ["a2cid2", "adpsgd", "allreduce"], grid, runs=2, seed=0)
    for name, r in results.items():
        loss = r.median("loss")
        assert loss[-1] < 0.6 * loss[0], name
        assert r.median("accuracy")[-1] > 0.8, name
    assert np.all(results["allreduce"].curves["consensus"] == 0)
    # A common start: the models only drift apart through their own gradients.
    assert np.all(results["adpsgd"].curves["consensus"][:, 0] == 0)


def test_a2cid2_reaches_consensus_sooner_than_adpsgd() -> None:
    problem = make_problem(
        "cycle:16", "softmax", "iris", "iid:0", lr=0.0, momentum=0.0, per_node_init=True
    )
    grid = np.linspace(0, 80, 9)
    results = run_training(problem, ["a2cid2", "adpsgd", "local"], grid, runs=2, seed=1)
    start = results["adpsgd"].median("consensus")[0]
    assert start > 0
    assert np.allclose(results["local"].median("consensus"), start)
    acid, ad = results["a2cid2"].median("consensus")[-1], results["adpsgd"].median("consensus")[-1]
    # Theory: exp(-t/sqrt(chi1 chi2)) against exp(-t/chi1): orders of magnitude apart by t = 80.
    assert acid < 1e-3 * ad


def test_bad_grid_and_runs_are_named(iris_cycle: TrainingProblem) -> None:
    with pytest.raises(ConfigError, match="--runs"):
        run_training(iris_cycle, ["local"], np.linspace(0, 1, 3), runs=0)
    with pytest.raises(ConfigError, match="increasing"):
        run_training(iris_cycle, ["local"], np.array([0.0, 2.0, 1.0]), runs=1)


def _drawn_in_turn(problem: TrainingProblem, seed: int, run: int) -> np.ndarray:
    # The simulator's rule spelled out on its own: node 0 draws first from the run's init
    # stream, then (per-node) each next node in id order; a common start repeats node 0's.
    rng = init_stream(seed, run)
    first = problem.model.initial(rng)
    rows = [first]
    for _ in range(problem.topology.n - 1):
        rows.append(problem.model.initial(rng) if problem.per_node_init else first)
    return np.stack(rows)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("per_node", [True, False])
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), run=st.integers(0, 3), node=st.integers(0, 4))
def test_a_nodes_own_initial_model_is_its_row_of_the_simulators_bit_for_bit(
    dtype: str, per_node: bool, seed: int, run: int, node: int
) -> None:
    problem = make_problem(
        "cycle:5", "mlp:8", "iris", "iid:0", dtype=dtype, seed=seed, per_node_init=per_node
    )
    whole = problem.initial(seed, run)
    assert np.array_equal(whole, _drawn_in_turn(problem, seed, run))
    mine = node_initial(problem.model, seed, run, node, per_node)
    assert mine.dtype == np.dtype(dtype) == whole.dtype
    assert mine.tobytes() == whole[node].tobytes()
    # Per-node starts differ from node to node; a common start is node 0's everywhere.
    other = whole[(node + 1) % 5]
    assert np.array_equal(mine, other) != per_node


def test_a_node_id_below_zero_is_refused_by_name(iris_cycle: TrainingProblem) -> None:
    with pytest.raises(ConfigError, match="-1"):
        node_initial(iris_cycle.model, 0, 0, -1, per_node=True)


@given(
    start=st.floats(1e-3, 1e3),
    growth=st.floats(0.0, 1e5),
)
def test_a_loss_is_diverged_past_the_growth_rule_only(start: float, growth: float) -> None:
    from continuized.gossip.train.scores import DIVERGED_GROWTH, diverged

    assert not diverged(np.array([start, start * growth, start / 2]))
    assert diverged(np.array([start, start * DIVERGED_GROWTH * 1.01]))
    assert diverged(np.array([start, np.inf]))
    assert diverged(np.array([start, np.nan]))


def test_settled_time_counts_a_curve_from_where_it_stays_below() -> None:
    from continuized.gossip.train.scores import TrainingResult

    grid = np.arange(5.0)
    curves = {m: np.zeros((3, 5)) for m in ("loss", "accuracy", "node_accuracy")}
    curves["consensus"] = np.array(
        [[1.0, 0.5, 1e-4, 1e-5, 1e-6], [0.0, 1e-2, 1e-4, 1e-2, 1e-4], [0.0, 0.1, 0.2, 0.3, 1.0]]
    )
    result = TrainingResult("adpsgd", grid, curves)
    assert result.settled_time("consensus", 1e-3) == [2.0, 4.0, None]
