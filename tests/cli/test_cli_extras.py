"""The lean core and its extras: what ``pip install continuized-gossip`` leaves out, and what a
command says when it needs an extra that is missing.

A missing extra is simulated, not uninstalled: a ``sitecustomize`` on ``PYTHONPATH`` makes the
heavy packages fail to import in the command's process and in every process it starts (the
nodes of ``gossip up``), as in a fresh core-only environment.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOSSIP = [sys.executable, "-m", "continuized.cli.app"]

HEAVY = ("scipy", "sklearn", "numba", "llvmlite", "matplotlib", "plotly")
"""The import names of the heavy packages: none of them is in the core."""

_BLOCKER = """
import sys

class _Missing:
    # Finds the blocked packages as absent, as in an environment without the extras.
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _Missing())
"""


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower()


def test_the_core_dependencies_leave_the_heavy_packages_to_the_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    heavy = {"scipy", "scikit-learn", "numba", "llvmlite", "matplotlib", "plotly", "aiohttp"}
    assert not core & heavy, f"in the core: {core & heavy}"
    extras = project["optional-dependencies"]
    named = {_name(r) for extra in ("sim", "data", "plot", "dashboard") for r in extras[extra]}
    assert heavy - {"llvmlite"} <= named  # llvmlite comes with numba
    assert extras["all"] == ["continuized-gossip[sim,data,plot,dashboard]"]
    assert "continuized-gossip[all]" in extras["dev"]


def _blocked_env(tmp_path: Path, blocked: tuple[str, ...] = HEAVY) -> dict[str, str]:
    site = tmp_path / "blocker"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_BLOCKER.format(blocked=blocked))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    env.update(PYTHONPATH=str(site), COLUMNS="300", TMPDIR=str(tmp_path))
    return env


def _run_blocked(  # type: ignore[no-untyped-def]
    args: list[str], tmp_path: Path, timeout: float = 120, blocked: tuple[str, ...] = HEAVY
):
    return subprocess.run(
        [*GOSSIP, *args],
        cwd=tmp_path,
        env=_blocked_env(tmp_path, blocked),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


_SMALL = ["--runs", "1", "--no-progress", "--json", "out.json"]

MISSING = [
    (["simulate", "--graph", "line:4", "--plot", "a.png", *_SMALL], "--plot", "plot"),
    (["optimize", "--graph", "line:4", "--data", "synthetic:0", *_SMALL], "gossip optimize", "sim"),
    (["train", "--graph", "cycle:4", "--data", "digits", *_SMALL], "--data digits", "data"),
    (
        ["train", "--graph", "cycle:4", "--data", "npz:d.npz", "--plot", "a.png", *_SMALL],
        "--plot",
        "plot",
    ),
    (["reproduce", "gossip-figure", "--out", "figs"], "gossip reproduce gossip-figure", "plot"),
    (["reproduce", "optim-figure", "--out", "figs"], "gossip reproduce optim-figure", "sim"),
    (["up", "--graph", "line:4", "--problem", "ridge:1"], "--problem ridge:1", "sim"),
    (
        ["up", "--graph", "cycle:4", "--train", "mlp:8", "--json", "out.json"],
        "--data digits",
        "data",
    ),
    (["coordinator", "--graph", "line:4", "--problem", "ridge:1"], "--problem ridge:1", "sim"),
]


@pytest.mark.parametrize(("args", "needed_by", "extra"), MISSING, ids=lambda v: str(v)[:40])
def test_a_missing_extra_is_named_in_one_line_before_any_work(
    args: list[str], needed_by: str, extra: str, tmp_path: Path
) -> None:
    done = _run_blocked(args, tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {needed_by} needs "), lines[0]
    assert lines[0].endswith(f"pip install 'continuized-gossip[{extra}]'"), lines[0]
    assert done.stdout == ""
    # Before any work: no output, no figure directory, nothing left in TMPDIR.
    assert not (tmp_path / "out.json").exists()
    assert not (tmp_path / "figs").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]


@pytest.mark.parametrize("command", ["up", "coordinator"])
def test_a_dashboard_without_its_server_is_refused_before_any_work(
    command: str, tmp_path: Path
) -> None:
    args = [command, "--graph", "line:4", "--dashboard-port", "0", "--json", "out.json"]
    done = _run_blocked(args, tmp_path, blocked=(*HEAVY, "aiohttp"))
    assert done.returncode == 2, done.stderr
    # The coordinator's own line about --keys may come first; the refusal is the one error.
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: --dashboard-port needs aiohttp, prometheus-client and plotly "
        "(aiohttp is not installed): pip install 'continuized-gossip[dashboard]'"
    ]
    assert done.stderr.strip().splitlines()[-1] == errors[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]


def test_simulate_runs_on_numpy_without_the_sim_extra_and_says_so(tmp_path: Path) -> None:
    done = _run_blocked(["simulate", "--graph", "line:6", "--t-end", "50", *_SMALL], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "numba is not installed: the simulator runs its NumPy engine" in done.stderr
    assert "pip install 'continuized-gossip[sim]'" in done.stderr
    summary = json.loads((tmp_path / "out.json").read_text())
    assert set(summary["algorithms"]) == {"rg", "arg"}


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_gossip_up_reaches_eps_with_no_heavy_package(tmp_path: Path) -> None:
    done = _run_blocked(
        [
            "up",
            "--graph",
            "line:4",
            "--rate",
            "200",
            "--until",
            "1e-3",
            "--json",
            "run.json",
            "--dashboard-port",
            "0",
            "--quiet",
        ],
        tmp_path,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["reached"] is True
    # The dashboard served without plotly, and said why in one line.
    assert "the dashboard needs aiohttp, prometheus-client and plotly (plotly is" in done.stderr
    assert "pip install 'continuized-gossip[dashboard]'" in done.stderr
