"""``live_objective``: the one rule for a live run's --problem, --data and --split defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.cli.options.objective import Objective, live_objective
from continuized.gossip.errors import ConfigError
from continuized.gossip.train.recipe import Recipe

ROOT = Path(__file__).resolve().parents[3]
specs = st.sampled_from(["", "iid:3", "label:1", "csv:/data", "digits", "wine"])


def _objective(
    problem: str = "", data: str = "", split: str = "", train: str = "", init: str = "common"
) -> Objective:
    return live_objective(
        problem=problem,
        data=data,
        split=split,
        train=train,
        algorithm="",
        rate_com=1.0,
        lr=0.1,
        momentum=0.0,
        batch_size=16,
        init=init,
        train_seed=0,
    )


@given(data=specs, split=specs)
def test_averaging_keeps_data_and_split_as_given(data: str, split: str) -> None:
    # The nodes may bring their own data: nothing is filled in or cleared.
    assert _objective(data=data, split=split) == Objective("", data, split, None)


@given(data=specs, split=specs)
def test_a_problem_fills_in_only_what_is_missing(data: str, split: str) -> None:
    got = _objective("logistic:0.1", data, split)
    assert got.data == (data or "breast-cancer")
    assert got.split == (split or "iid:0")
    assert got.training is None


@given(data=specs, split=specs)
def test_training_moves_data_and_split_into_the_recipe(data: str, split: str) -> None:
    got = _objective(data=data, split=split, train="softmax")
    assert (got.problem, got.data, got.split) == ("", "", "")
    assert isinstance(got.training, Recipe)
    assert got.training.data == (data or "digits")
    assert got.training.split == (split or "iid:0")
    assert got.training.algorithm == "a2cid2"


def test_the_recipe_takes_data_as_given_not_the_problem_default() -> None:
    # With both --problem and --train, the recipe's default is training's own (digits), not
    # the problem's breast-cancer.
    got = _objective("ridge:1", train="softmax")
    assert got.data == "breast-cancer"
    assert got.training is not None
    assert got.training.data == "digits"


def test_a_bad_training_option_is_named() -> None:
    with pytest.raises(ConfigError, match="--init must be one of common, per-node, got 'bogus'"):
        _objective(train="softmax", init="bogus")


@pytest.mark.parametrize("command", ["coordinator", "up"])
def test_both_live_commands_report_a_bad_training_option_as_an_error(
    command: str, tmp_path: Path
) -> None:
    # gossip coordinator used to let this one through as a traceback (exit 1).
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "continuized.cli.app",
            command,
            "--train",
            "softmax",
            "--init",
            "bogus",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "error: --init must be one of common, per-node, got 'bogus'" in done.stderr
    assert "Traceback" not in done.stderr
