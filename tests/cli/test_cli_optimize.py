"""``gossip optimize`` and ``gossip reproduce optimization-figure`` end to end; bad input named."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from continuized.cli.app import app
from continuized.gossip.dual.network import build_network

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    # At 80 columns, as in a default terminal: every table must fit it whole.
    result = runner.invoke(app, list(args), env={"COLUMNS": "80"})
    return result.exit_code, result.output


def _tables_fit(out: str) -> None:
    """Every table line fits 80 columns and no figure is cut with an ellipsis."""
    assert "\N{HORIZONTAL ELLIPSIS}" not in out, out
    table_lines = [line for line in out.splitlines() if line[:1] in "┏┃┡│└"]
    assert table_lines, out
    assert max(len(line) for line in table_lines) <= 80, out


def test_optimize_writes_png_csv_and_json(tmp_path: Path) -> None:
    png, table, summary = tmp_path / "out" / "r.png", tmp_path / "r.csv", tmp_path / "r.json"
    code, out = _run(
        "optimize",
        "--graph", "line:6",
        "--problem", "ridge:1",
        "--data", "breast-cancer",
        "--split", "iid:3",
        "--algorithm", "acd",
        "--algorithm", "cd",
        "--algorithm", "dgd",
        "--runs", "4",
        "--t-end", "3000",
        "--grid-points", "31",
        "--eps", "1e-4",
        "--seed", "2",
        "--no-progress",
        "--plot", str(png),
        "--csv", str(table),
        "--json", str(summary),
    )  # fmt: skip
    assert code == 0, out
    _tables_fit(out)
    # The split's description and every parameter are printed.
    for word in ("iid", "mu_gossip", "kappa", "L_dual", "gamma'", "alpha", "t_eps"):
        assert word in out, word
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == 31
    assert float(rows[-1]["t"]) == 3000.0
    assert {"acd_mean", "cd_q95", "dgd_run0", "acd_gap_mean", "cd_consensus_mean"} <= set(rows[0])
    data = json.loads(summary.read_text())
    expected = build_network("ridge:1", "breast-cancer", "iid:3", 6).problems.x_star()
    np.testing.assert_allclose(data["x_star"], expected, rtol=1e-9, atol=1e-12)
    assert set(data["algorithms"]) == {"acd", "cd", "dgd"}
    for name, a in data["algorithms"].items():
        row = next(line for line in out.splitlines() if line.startswith(f"│ {name} "))
        for key in ("final_median", "final_mean", "final_gap_mean", "final_consensus_mean"):
            assert f"{a[key]:.3e}" in row, (key, row)
    acd = data["algorithms"]["acd"]
    for key in ("eta", "gamma", "gamma_prime", "mu_dual", "L_dual", "theta", "kappa"):
        assert key in acd["params"]
    assert acd["t_eps"] is not None
    assert 0 < acd["t_eps"] <= 3000.0
    assert acd["final_median"] <= 1e-4
    # t_eps is the first grid time at which the median error is <= eps.
    medians = np.array([float(r["acd_q50"]) for r in rows])
    first = int(np.flatnonzero(medians <= 1e-4)[0])
    assert acd["t_eps"] == pytest.approx(float(rows[first]["t"]))
    assert data["theory_factor"] > 1.0
    assert "step_search" in data["algorithms"]["dgd"]


def test_reproduce_optimization_figure_quick(tmp_path: Path) -> None:
    code, out = _run(
        "reproduce", "optimization-figure", "--out", str(tmp_path), "--runs", "2",
        "--t-scale", "0.02", "--workers", "1", "--no-progress",
    )  # fmt: skip
    assert code == 0, out
    for name in ("optimization-breast-cancer.png", "optimization-dadao.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((tmp_path / "optimization-figure.json").read_text())
    assert len(summary["panels"]) == 16
    assert "barbell" in out
    assert "cd/acd" in out
    _tables_fit(out)
    # One row per panel, with its measured t_eps whole.
    for setting, panel, _eps, acd, *_rest in summary["table"]:
        row = next(line for line in out.splitlines() if f"│ {setting} {panel} " in line)
        assert ("-" if acd is None else f"{acd:.0f}") in row.split("│")[3], row


@pytest.mark.parametrize("cold", [True, False])
def test_a_first_compilation_is_said_for_a_compiled_sweep_only(
    monkeypatch: pytest.MonkeyPatch, cold: bool
) -> None:
    from continuized.cli import optimize_cmd
    from continuized.gossip.dual import compiled

    monkeypatch.setattr(compiled, "dual_kernel_compiles", lambda: cold)
    ridge = build_network("ridge:1", "breast-cancer", "iid:0", 4).problems
    said = "the optimization sweep's kernel" if cold else None
    assert optimize_cmd._compiling(["acd", "cd"], ridge) == said
    assert optimize_cmd._compiling() == said  # the figure's problems, all built in
    # A problem set without plain arrays (module:callable) is swept by numpy: nothing compiles.
    assert optimize_cmd._compiling(["acd"], object()) is None


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--problem", "lasso:1"], ["lasso"]),
        (["--data", "mnist"], ["mnist"]),
        (["--split", "random:0"], ["random"]),
        (["--algorithm", "adam"], ["adam", "acd, cd, dgd"]),
        (["--algorithm", "acd", "--algorithm", "acd"], ["twice"]),
        (["--graph", "ring:5"], ["ring"]),
        (["--runs", "0"], ["--runs", "0"]),
        (["--workers", "0"], ["--workers", "0"]),
        (["--eps", "-1"], ["--eps", "-1"]),
        (["--t-end", "nan"], ["--t-end", "nan"]),
        (["--estimate", "w"], ["--estimate", "w"]),
        (["--plot", "x.gif"], ["x.gif", ".png"]),
        (
            ["--problem", "logistic:0.1", "--data", "diabetes"],
            ["needs two classes", "'diabetes' has 214 distinct integer targets", "ridge:LAMBDA"],
        ),
        (["--data", "npz:README.md"], ["README.md is not an .npz file"]),
    ],
)
def test_bad_input_is_named(tmp_path: Path, args: list[str], words: list[str]) -> None:
    code, out = _run("optimize", "--graph", "line:4", "--runs", "1", "--t-end", "10", *args)
    assert code == 2, out
    assert "error" in out.lower()
    for word in words:
        assert word in out, (word, out)
