"""One rule for which algorithm runs which task: every command refuses, never swaps.

``gossip up`` and ``gossip coordinator`` are real subprocesses refused before anything starts;
``gossip optimize`` and ``gossip simulate`` run in process through typer's runner.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from continuized.cli.app import app

GOSSIP = [sys.executable, "-m", "continuized.cli.app"]


def _subprocess(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    env.update(TMPDIR=str(tmp_path), COLUMNS="200")
    return subprocess.run(
        [*GOSSIP, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )


LIVE_REFUSALS = [
    (["--problem", "quadratic", "--algorithm", "arg"], "valid: acd"),
    (["--problem", "quadratic", "--algorithm", "cd"], "valid: acd"),
    (["--algorithm", "acd"], "valid: arg, rg"),
]


@pytest.mark.parametrize("command", ["up", "coordinator"])
@pytest.mark.parametrize(
    ("args", "valid"), LIVE_REFUSALS, ids=[" ".join(a) for a, _ in LIVE_REFUSALS]
)
def test_a_live_cluster_refuses_an_algorithm_its_task_cannot_run(
    command: str, args: list[str], valid: str, tmp_path: Path
) -> None:
    result = _subprocess([command, "--graph", "line:4", *args], tmp_path)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert f"--algorithm '{args[-1]}'" in errors[0]
    assert errors[0].endswith(valid)
    assert "starting" not in result.stderr  # gossip up's line once the broker is up


def test_optimize_refuses_an_averaging_algorithm() -> None:
    result = CliRunner().invoke(app, ["optimize", "--algorithm", "arg", "--no-progress"])
    assert result.exit_code == 2
    assert "--algorithm 'arg' cannot run an optimization" in result.output
    assert "valid: acd, cd, dgd" in result.output


def test_simulate_refuses_an_optimization_algorithm() -> None:
    result = CliRunner().invoke(app, ["simulate", "--algorithm", "acd"])
    assert result.exit_code == 2
    assert "--algorithm 'acd' cannot run an averaging run" in result.output
    assert "valid: arg, rg" in result.output
