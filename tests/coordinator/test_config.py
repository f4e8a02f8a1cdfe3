"""The coordinator's settings (coordinator/config.py): what it refuses before anything starts."""

from __future__ import annotations

import pytest

from coordinator.config import CoordinatorConfig, prepare
from gossip.errors import ConfigError
from gossip.train.recipe import Recipe
from gossip.wire.checks import MAX_DIM


def _training(model: str) -> CoordinatorConfig:
    return CoordinatorConfig(graph="cycle:4", training=Recipe(model=model, data="digits"))


def test_a_model_too_large_for_the_bootstrap_is_refused_naming_its_size() -> None:
    # mlp:256 on digits: 64*256 + 256 + 256*10 + 10 parameters, past the list the nodes decode.
    with pytest.raises(ConfigError, match=r"mlp:256 on digits has 19,210 parameters") as err:
        prepare(_training("mlp:256"))
    assert f"{MAX_DIM:,}" in str(err.value)


def test_a_model_within_the_bound_is_prepared() -> None:
    _, plan = prepare(_training("mlp:128"))
    assert plan.dim == 9_610 <= MAX_DIM
