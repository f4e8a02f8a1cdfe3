"""A training node's own start (node.learner): its shard, its model, and its initial model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from continuized.gossip.errors import ConfigError
from continuized.gossip.train.recipe import Recipe
from continuized.gossip.wire.schema import Bootstrap, decode, encode
from continuized.node.learner import initial_model, load_learner


def _boot(recipe: Recipe, node: int, dim: int) -> Bootstrap:
    return Bootstrap(
        node_id=node,
        cluster="train",
        algorithm=recipe.algorithm,
        eta=0.5,
        c=0.5,
        theta=0.0,
        epoch=1_700_000_000.0,
        rate=20.0,
        neighbors=(),
        initial_value=(),
        broker="",
        metrics_period=2.0,
        dim=dim,
        data=recipe.data,
        split=recipe.split,
        n=4,
        train=recipe.model,
        rate_com=recipe.rate_com,
        lr=recipe.lr,
        batch_size=recipe.batch_size,
        seed=recipe.seed,
        init=recipe.init,
    )


@pytest.mark.parametrize("init", ["per-node", "common"])
def test_a_node_draws_the_coordinators_and_the_simulators_initial_model_itself(init: str) -> None:
    recipe = Recipe("mlp:16", "digits", "iid:0", init=init, seed=3)
    whole = recipe.initial(recipe.problem("cycle:4"))
    for node in (0, 3):
        boot = decode(encode(_boot(recipe, node, whole.shape[1])))  # as the wire brings it
        assert isinstance(boot, Bootstrap)
        mine = initial_model(boot, load_learner(boot))
        assert mine.tobytes() == whole[node].tobytes()
    assert (init == "common") == bool(np.array_equal(whole[0], whole[3]))


def test_a_bootstrap_that_carries_the_model_is_taken_as_it_is() -> None:
    recipe = Recipe("softmax", "iris", "iid:0")
    boot = dataclasses.replace(_boot(recipe, 1, 15), initial_value=tuple([0.25] * 15), init="")
    assert initial_model(boot, load_learner(boot)).tolist() == [0.25] * 15


def test_a_model_of_another_size_than_the_clusters_is_refused_naming_both() -> None:
    recipe = Recipe("softmax", "iris", "iid:0")
    with pytest.raises(ConfigError, match="has 15 parameters, but the cluster's has d = 16"):
        load_learner(_boot(recipe, 0, 16))
