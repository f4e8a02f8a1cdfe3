"""An option that several commands share reads the same in each: help, variable, checks.

The declarations are in ``cli/options/``; these tests read the commands as Typer built them,
so a command that declares a shared option again, with other words, fails here.
"""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.core import TyperOption
from typer.testing import CliRunner

from continuized.cli.app import app

runner = CliRunner()


def _command(path: str) -> Any:
    command: Any = typer.main.get_command(app)
    for word in path.split():
        command = command.commands[word]
    return command


def _option(path: str, flag: str) -> TyperOption:
    for param in _command(path).params:
        if isinstance(param, TyperOption) and flag in param.opts:
            return param
    raise AssertionError(f"gossip {path} has no {flag}")


SHARED = [
    ("--runs", ["simulate", "optimize", "train"]),
    (
        "--runs",
        ["reproduce gossip-figure", "reproduce optimization-figure", "reproduce training-figure"],
    ),
    ("--grid-points", ["simulate", "optimize", "train"]),
    ("--grid-points", ["reproduce gossip-figure", "reproduce training-figure"]),
    (
        "--seed",
        ["reproduce gossip-figure", "reproduce optimization-figure", "reproduce training-figure"],
    ),
    ("--eps", ["simulate", "reproduce gossip-figure"]),
    ("--workers", ["simulate", "reproduce gossip-figure"]),
    ("--values", ["simulate", "up"]),
    ("--dim", ["simulate", "coordinator", "up"]),
    ("--lr", ["train", "reproduce training-figure"]),
    ("--momentum", ["train", "reproduce training-figure"]),
    ("--t-end", ["train", "reproduce training-figure"]),
    (
        "--out",
        [
            "reproduce optim-figure",
            "reproduce optimization-figure",
            "reproduce training-figure",
            "reproduce gossip-figure",
        ],
    ),
    ("--plot", ["simulate", "optimize", "train"]),
    ("--progress", ["simulate", "optimize", "train", "reproduce gossip-figure"]),
    ("--mqtt-ca", ["coordinator", "submit", "node"]),
    ("--problem", ["coordinator", "up"]),
    ("--train", ["coordinator", "up"]),
    ("--timeout", ["coordinator", "up"]),
    ("--dashboard-runs-dir", ["coordinator", "up"]),
]


@pytest.mark.parametrize(("flag", "commands"), SHARED)
def test_a_shared_option_has_one_help_and_one_variable(flag: str, commands: list[str]) -> None:
    options = [_option(path, flag) for path in commands]
    helps = {path: option.help for path, option in zip(commands, options, strict=True)}
    assert len(set(helps.values())) == 1, helps
    assert {o.envvar for o in options} == {"GOSSIP_" + flag[2:].upper().replace("-", "_")}


@pytest.mark.parametrize(
    ("command", "flag", "value", "message"),
    [
        ("simulate", "--runs", "0", "--runs must be an integer >= 1, got 0"),
        ("optimize", "--runs", "0", "--runs must be an integer >= 1, got 0"),
        ("train", "--runs", "0", "--runs must be an integer >= 1, got 0"),
        ("optimize", "--grid-points", "1", "--grid-points must be an integer >= 2, got 1"),
        ("train", "--grid-points", "1", "--grid-points must be an integer >= 2, got 1"),
        ("optimize", "--seed", "-1", "--seed must be an integer >= 0, got -1"),
        ("train", "--t-end", "0", "--t-end must be a finite number > 0, got 0.0"),
        ("optimize", "--t-end", "inf", "--t-end must be a finite number > 0, got inf"),
        ("optimize", "--eps", "0", "--eps must be a finite number > 0, got 0.0"),
    ],
)
def test_every_batch_command_refuses_a_bad_count_alike(
    command: str, flag: str, value: str, message: str
) -> None:
    result = runner.invoke(app, [command, "--no-progress", flag, value])
    assert result.exit_code == 2, result.output
    assert f"error: {message}" in " ".join(result.output.split())


@pytest.mark.parametrize("flag", ["--lr", "--momentum", "--batch-size", "--rate-com", "--init"])
def test_a_live_run_trains_with_the_defaults_of_gossip_train(flag: str) -> None:
    defaults = {path: _option(path, flag).default for path in ("train", "up", "coordinator")}
    assert len(set(defaults.values())) == 1, defaults
