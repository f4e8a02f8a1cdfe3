"""``gossip reproduce optim-figure`` end to end, as a real subprocess."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

GOSSIP = [sys.executable, "-c", "from continuized.cli.app import main; main()"]


def _gossip(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GOSSIP, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.mark.slow
def test_optim_figure_reproduces_the_paper(tmp_path: Path) -> None:
    # The full default run: 1000 continuized runs for the comparison, 100 per method for noise.
    out = tmp_path / "figures"
    proc = _gossip("reproduce", "optim-figure", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "convergence slopes" in proc.stdout
    for name in ("optim_comparison.png", "optim_noise.png"):
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG")
        assert len(data) > 50_000  # four panels of curves, not an empty canvas
    summary = json.loads((out / "optim_figures.json").read_text())
    assert summary["settings"]["runs"] == 1000
    assert summary["settings"]["noise_runs"] == 100
    comparison = summary["slopes"]["comparison"]
    # Acceleration shows: on the convex panel the accelerated methods decay at least as fast
    # as k^-2 and much faster than gradient descent ...
    convex = comparison["convex"]
    assert convex["continuized_nesterov"]["measured"] <= -2.0
    assert convex["nesterov"]["measured"] <= -2.0
    assert convex["gradient_descent"]["measured"] > -2.0
    # ... and on the strongly convex one at least at their guaranteed rates (sqrt(mu/L) = 0.1
    # per step), about ten times the rate of gradient descent.
    strong = comparison["strongly_convex"]
    for method in ("nesterov", "continuized_nesterov"):
        assert strong[method]["measured"] <= strong[method]["theory"]
    assert strong["continuized_nesterov"]["measured"] < 5 * strong["gradient_descent"]["measured"]
    # Noise from the optimum: linear growth in the convex case, a plateau below the bound.
    noise = summary["slopes"]["noise"]
    assert 0.7 < noise["convex"]["continuized_nesterov"]["measured"] < 1.5
    assert (
        noise["convex"]["continuized_nesterov"]["final"]
        < noise["convex"]["continuized_nesterov"]["bound"]
    )
    plateau = noise["strongly_convex"]["continuized_nesterov"]
    assert 0 < plateau["plateau"] < plateau["bound"]
    with (out / "optim_comparison_convex.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 1001
    assert {"k", "continuized_nesterov_mean", "continuized_nesterov_q05"} <= set(rows[0])
    last = rows[-1]
    q05, mean, q95 = (float(last[f"continuized_nesterov_{s}"]) for s in ("q05", "mean", "q95"))
    assert q05 <= mean <= q95
    assert math.isfinite(float(last["gradient_descent_one_run"]))


def test_optim_figure_small_run_from_environment(tmp_path: Path) -> None:
    proc = _gossip(
        "reproduce",
        "optim-figure",
        env={"GOSSIP_OUT": str(tmp_path), "GOSSIP_RUNS": "20", "GOSSIP_NOISE_RUNS": "5"},
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "optim_figures.json").read_text())
    assert summary["settings"]["runs"] == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(summary["files"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--runs", "0"], "--runs"),
        (["--noise-runs", "-2"], "--noise-runs"),
        (["--seed", "-1"], "--seed"),
        (["--runs", "many"], "--runs"),
    ],
)
def test_optim_figure_bad_options_exit_2(args: list[str], message: str) -> None:
    proc = _gossip("reproduce", "optim-figure", *args)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_optim_figure_out_is_a_file_exits_2(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("not a directory")
    proc = _gossip("reproduce", "optim-figure", "--out", str(target), "--runs", "2")
    assert proc.returncode == 2
    assert "error:" in proc.stderr
    assert "exists and is not a directory" in proc.stderr
    assert "Traceback" not in proc.stderr
