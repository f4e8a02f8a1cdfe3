"""A user's ``--problem``/``--model`` module is found in the folder ``gossip`` runs from.

Each command runs as the console script runs it, ``python -P -m continuized.cli.app``: the
current folder is not on the import path (``-P``), and the module must still be found there,
by the command and by the node processes ``gossip up`` starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

GOSSIP = [sys.executable, "-P", "-m", "continuized.cli.app"]

# f_v = 1/2 |x - b_v|^2 with b_0 = 1 and the others 0 (x* = 1/n), as a user would write it.
USER_PROBLEM = """\
from continuized.gossip.problems.quadratic import Quadratic


def make(shard, node):
    return Quadratic([1.0 if node == 0 else 0.0])
"""


def _run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    tmp = cwd / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    env.pop("PYTHONPATH", None)  # the folder must be found for its own sake
    env.update(TMPDIR=str(tmp), COLUMNS="200")
    return subprocess.run(
        [*GOSSIP, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A user's folder holding their own problem, ``mymod.py``."""
    (tmp_path / "mymod.py").write_text(USER_PROBLEM, encoding="utf-8")
    return tmp_path


def test_gossip_optimize_finds_the_problem_module_in_its_folder(folder: Path) -> None:
    done = _run(
        ["optimize", "--graph", "line:3", "--problem", "mymod:make", "--algorithm", "acd",
         "--runs", "2", "--t-end", "50", "--grid-points", "6", "--no-progress",
         "--json", "out.json"],
        folder,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((folder / "out.json").read_text())
    assert summary["x_star"] == pytest.approx([1 / 3])


@pytest.mark.parametrize("command", ["optimize", "up"])
def test_a_module_not_in_the_folder_is_one_error_line_before_anything_starts(
    folder: Path, command: str
) -> None:
    done = _run([command, "--graph", "line:3", "--problem", "notmine:make"], folder)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "'notmine:make'" in errors[0]
    assert str(folder.resolve()) in errors[0]
    assert "run from the folder that holds notmine.py" in errors[0]
    assert not any((folder / "tmp").iterdir())  # no node, no broker, not even their logs


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_gossip_up_nodes_find_the_problem_module_where_gossip_up_ran(folder: Path) -> None:
    done = _run(
        ["up", "--graph", "line:3", "--problem", "mymod:make", "--until", "1e-4",
         "--json", "run.json", "--quiet"],
        folder,
        timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((folder / "run.json").read_text())
    assert summary["reached"] is True
