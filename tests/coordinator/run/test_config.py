"""The coordinator's settings (coordinator/run/config.py): what it refuses before anything
starts."""

from __future__ import annotations

import pytest

from continuized.coordinator.figures.train_measure import LIVE_MAX_DIM
from continuized.coordinator.membership.plan import build_bootstraps
from continuized.coordinator.membership.registry import Registry
from continuized.coordinator.run.config import CoordinatorConfig, prepare
from continuized.gossip.errors import ConfigError
from continuized.gossip.train.recipe import Recipe
from continuized.gossip.wire.checks import MAX_DIM, MAX_RAW_DIM
from continuized.gossip.wire.schema import Register, decode, encode


def _training(model: str, init: str = "common") -> CoordinatorConfig:
    return CoordinatorConfig(
        graph="cycle:4", training=Recipe(model=model, data="digits", init=init)
    )


def test_a_model_past_a_list_of_floats_is_prepared_and_its_bootstraps_carry_none() -> None:
    # mlp:256:64 on digits: 64*256 + 256 + 256*64 + 64 + 64*10 + 10 parameters, past the
    # MAX_DIM floats of a list: each node draws its own model, the Bootstraps carry none.
    _, plan = prepare(_training("mlp:256:64", init="per-node"))
    assert plan.dim == 33_738 > MAX_DIM
    assert plan.values is not None
    assert plan.values.shape == (4, 33_738)
    registry = Registry(plan, "run")
    for k in range(4):
        registry.register(Register(f"node-{k}", f"tcp://127.0.0.1:{7000 + k}", None, 1), 0.0)
    assert registry.assignment is not None
    boots = build_bootstraps(plan, registry.assignment)
    assert [b.initial_value for b in boots] == [()] * 4
    assert {(b.dim, b.init, b.train) for b in boots} == {(33_738, "per-node", "mlp:256:64")}
    assert all(decode(encode(b)) == b for b in boots)


def test_a_model_whose_reports_pass_an_mqtt_packet_is_refused_naming_its_size_and_the_fix() -> None:
    # mlp:65076 on digits: 75 * 65076 + 10 parameters, past what one report carries.
    assert LIVE_MAX_DIM == 4_880_644 < MAX_RAW_DIM
    with pytest.raises(ConfigError, match=r"mlp:65076 on digits has 4,880,710 parameters") as err:
        prepare(_training("mlp:65076"))
    assert "at most 4,880,644" in str(err.value)
    assert "narrower layers" in str(err.value)


def test_a_small_model_is_prepared() -> None:
    _, plan = prepare(_training("mlp:128"))
    assert plan.dim == 9_610
