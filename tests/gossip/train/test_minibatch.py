"""A live node's local optimizer steps exactly as the simulator's node does."""

from __future__ import annotations

import numpy as np
import pytest

from continuized.gossip.errors import ConfigError
from continuized.gossip.train import Workers, make_problem, node_stream
from continuized.gossip.train.minibatch import LocalSgd, gradient_times
from continuized.gossip.train.recipe import Recipe


def test_the_kth_step_of_a_live_node_is_the_simulators_kth_step_of_that_node() -> None:
    problem = make_problem("cycle:4", "mlp:8", "iris", "dirichlet:0.5:0", lr=0.2, momentum=0.9)
    node = 2
    start = problem.initial(0, 0)
    workers = Workers("local", start, problem.sgd)  # local: only the steps move x
    sim_stream = node_stream(0, node)
    live = LocalSgd(problem.model, problem.data.shards[node], node_stream(0, node), problem.sgd, 16)
    x = start[node].copy()
    shard = problem.data.shards[node]
    for _ in range(25):
        # The simulator's gradient event (gossip.train.trainer.run_once), spelled out.
        rows = sim_stream.integers(shard.m, size=16)
        _, grad = problem.model.loss_and_grad(
            workers.params_at(node, 0.0), (shard.A[rows], shard.y[rows])
        )
        workers.apply_gradient(node, grad)
        x -= live.step(x)
        np.testing.assert_allclose(x, workers.x[node], rtol=0, atol=1e-12)
    assert live.steps == 25


def test_with_lr_0_the_stream_still_advances_and_the_step_is_zero() -> None:
    problem = make_problem("cycle:3", "softmax", "iris", "iid:0", lr=0.0)
    a = LocalSgd(problem.model, problem.data.shards[0], node_stream(0, 0), problem.sgd, 4)
    x = problem.initial(0, 0)[0]
    assert not a.step(x).any()
    reference = node_stream(0, 0)
    reference.integers(problem.data.shards[0].m, size=4)
    assert a.stream.integers(1000) == reference.integers(1000)


def test_the_gradient_clock_has_rate_1_and_its_own_seeded_stream() -> None:
    times = gradient_times(5, 1)
    first = [next(times) for _ in range(20_000)]
    assert np.all(np.diff(first) > 0)
    assert first[-1] / len(first) == pytest.approx(1.0, rel=0.03)  # mean gap 1 unit of t
    again = gradient_times(5, 1)
    assert [next(again) for _ in range(5)] == first[:5]
    other = gradient_times(5, 2)
    assert next(other) != first[0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"algorithm": "allreduce"}, "allreduce runs in gossip train only"),
        ({"init": "random"}, "--init must be one of common, per-node"),
        ({"rate_com": 0.0}, "--rate-com must be a finite number > 0"),
    ],
)
def test_a_recipe_refuses_what_a_live_cluster_cannot_run(
    kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        Recipe("mlp:64", **kwargs)  # type: ignore[arg-type]


def test_a_recipes_constants_are_a2cid2s_for_a2cid2_and_zero_otherwise() -> None:
    recipe = Recipe("softmax", "iris", "iid:0", "a2cid2")
    problem = recipe.problem("cycle:6")
    eta, c = recipe.exchange_constants(problem)
    assert (eta, c) == (problem.constants.eta, problem.constants.alpha_tilde)
    assert Recipe("softmax", "iris", "iid:0", "adpsgd").exchange_constants(problem) == (0.0, 0.0)
    initial = recipe.initial(problem)
    assert initial.dtype == np.float64
    assert np.array_equal(initial[0], initial[5])  # common: one model for all
    per_node = Recipe("softmax", "iris", "iid:0", init="per-node")
    assert not np.array_equal(*per_node.initial(per_node.problem("cycle:6"))[:2])
