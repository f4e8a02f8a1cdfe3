"""``gossip up --train`` / ``gossip coordinator --train``: bad input is a clear error naming it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli.app import app


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--train", "mlp:64", "--algorithm", "allreduce"], "allreduce runs in gossip train only"),
        (["--train", "nosuch:3"], "nosuch"),
        (["--train", "mlp:64", "--data", "nosuch-set"], "nosuch-set"),
        (["--train", "mlp:64", "--init", "zeros"], "--init must be one of common, per-node"),
        (["--train", "mlp:64", "--rate-com", "0"], "--rate-com must be a finite number > 0"),
        (["--until-accuracy", "0.9"], "--until-accuracy 0.9 needs --train"),
        (["--train", "mlp:64", "--until-accuracy", "90"], "--until-accuracy must be in (0, 1]"),
        (["--train", "mlp:64", "--problem", "logistic:0.1"], "two different runs"),
    ],
)
def test_gossip_up_refuses_bad_training_input_before_starting_anything(
    args: list[str], needle: str
) -> None:
    result = CliRunner().invoke(app, ["up", "--graph", "cycle:4", "--quiet", *args])
    assert result.exit_code == 2, result.output
    assert "error:" in result.output
    assert needle in result.output
