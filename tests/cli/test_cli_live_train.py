"""``gossip up --train`` / ``gossip coordinator --train``: bad input is a clear error naming it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from continuized.cli.app import app


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
        (
            ["--train", "examples.linear_svm_model:make", "--init", "per-node"],
            "callable takes no rng",
        ),
        (["--problem", "logistic:0.1", "--data", "diabetes"], "needs two classes"),
    ],
)
def test_gossip_up_refuses_bad_training_input_before_starting_anything(
    args: list[str], needle: str
) -> None:
    result = CliRunner().invoke(app, ["up", "--graph", "cycle:4", "--quiet", *args])
    assert result.exit_code == 2, result.output
    assert "error:" in result.output
    assert needle in result.output


def test_the_summary_table_says_the_accuracy_verdict_or_why_it_is_unknown() -> None:
    from continuized.cli._cluster_view import _training_verdict

    judged = {
        "typical": False,
        "alpha": 0.0247,
        "points": 12,
        "t_max": 30.0,
        "inside": 0.25,
        "offset_decades": 0.4,
        "p_inside": 0.0099,
        "p_offset": 0.0198,
        "runs": 50,
        "null_runs": 100,
        "status": "judged",
    }
    assert _training_verdict(judged) == (
        "ATYPICAL of the model's 100 runs (alpha 0.025): 25% of 12 points to t = 30 in its "
        "5-95% band (p = 0.010), test error offset +0.400 decades (p = 0.020)"
    )
    unknown = {"typical": None, "status": "unavailable: the simulation took over 300 s"}
    assert _training_verdict(unknown) == "unknown (unavailable: the simulation took over 300 s)"
