"""``gossip up --problem`` / ``gossip node --data``: bad input is a clear error naming it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from continuized.cli.app import app
from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.schema import Bootstrap

pytest.importorskip(
    "continuized.gossip.problems", reason="needs the optimization core (branch opt)"
)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--problem", "nosuch:1"], "nosuch"),
        (["--problem", "logistic:0.1", "--data", "nosuch-set"], "nosuch-set"),
        (["--problem", "logistic:0.1", "--split", "bogus:3"], "bogus:3"),
        (["--data", "breast-cancer", "--split", "iid:1"], "need --problem"),
    ],
)
def test_gossip_up_refuses_bad_optimization_input_before_starting_anything(
    args: list[str], needle: str
) -> None:
    # The coordinator checks the specs (it loads the public data for x*) before any broker or
    # node is started: the error comes at once, with exit code 2.
    result = CliRunner().invoke(app, ["up", "--graph", "line:3", "--quiet", *args])
    assert result.exit_code == 2, result.output
    assert "error:" in result.output
    assert needle in result.output


def test_gossip_node_refuses_a_data_source_it_cannot_read_before_registering() -> None:
    # Nothing listens at the coordinator's address: the error must come from the data first.
    result = CliRunner().invoke(
        app, ["node", "--coordinator", "tcp://127.0.0.1:9", "--data", "nosuch-set"]
    )
    assert result.exit_code == 2, result.output
    assert "nosuch-set" in result.output


def _boot(dim: int, data: str = "breast-cancer") -> Bootstrap:
    return Bootstrap(
        node_id=1,
        cluster="c",
        algorithm="acd",
        eta=0.01,
        c=1.0,
        theta=0.01,
        epoch=0.0,
        rate=100.0,
        neighbors=(),
        initial_value=(0.0,) * dim,
        broker="",
        metrics_period=0.1,
        dim=dim,
        problem="logistic:0.1",
        data=data,
        split="label:1",
        n=4,
    )


def test_a_node_builds_its_problem_from_its_own_shard() -> None:
    from continuized.node.problem import load_problem

    problem = load_problem(_boot(30))
    assert problem.dim == 30
    assert problem.mu == pytest.approx(0.1)


def test_a_shard_of_the_wrong_width_is_refused_naming_both_widths() -> None:
    from continuized.node.problem import load_problem

    # breast-cancer has 30 features; this cluster's problem says d = 5.
    with pytest.raises(ConfigError, match=r"has 30 features.*d = 5") as info:
        load_problem(_boot(5))
    assert "breast-cancer" in str(info.value)
