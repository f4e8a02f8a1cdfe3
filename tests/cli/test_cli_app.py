"""The ``gossip`` entry point itself: ``--version`` and the list of subcommands."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from typer.testing import CliRunner

from continuized.cli.app import app

runner = CliRunner()


def test_version_is_the_installed_distributions() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"gossip {version('continuized-gossip')}"


def test_help_lists_every_subcommand() -> None:
    # A fresh interpreter, as a user's shell runs it: every command module registers itself.
    out = subprocess.run(
        [sys.executable, "-m", "continuized.cli.app", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    for command in ("up", "node", "coordinator", "simulate", "train", "graph", "reproduce"):
        assert f" {command} " in out, out
