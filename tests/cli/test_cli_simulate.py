"""``gossip simulate`` and ``gossip reproduce gossip-figure`` end to end, and every bad argument."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from continuized.cli.app import app

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_simulate_writes_png_csv_and_json(tmp_path: Path) -> None:
    png, table, summary = tmp_path / "out" / "l.png", tmp_path / "l.csv", tmp_path / "l.json"
    code, out = _run(
        "simulate",
        "--graph",
        "line:12",
        "--runs",
        "40",
        "--t-end",
        "3000",
        "--grid-points",
        "31",
        "--eps",
        "1e-4",
        "--seed",
        "3",
        "--no-progress",
        "--plot",
        str(png),
        "--csv",
        str(table),
        "--json",
        str(summary),
    )
    assert code == 0, out
    assert "arg" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == 31
    assert float(rows[0]["t"]) == 0.0
    assert float(rows[-1]["t"]) == 3000.0
    assert set(rows[0]) == {"t"} | {
        f"{a}_{s}" for a in ("rg", "arg") for s in ("mean", "q05", "q50", "q95", "run0")
    }
    assert float(rows[-1]["arg_q05"]) <= float(rows[-1]["arg_q50"]) <= float(rows[-1]["arg_q95"])
    data = json.loads(summary.read_text())
    assert data["graph"] == "line:12"
    assert data["quantities"]["n"] == 12
    arg, rg = data["algorithms"]["arg"], data["algorithms"]["rg"]
    assert arg["theta"] == pytest.approx(data["quantities"]["theta_arg"])
    assert rg["eta"] == 0.0
    assert arg["runs"] == 40
    assert arg["t_eps"] is not None
    assert rg["t_eps"] is None or rg["t_eps"] > arg["t_eps"]
    assert arg["final_median"] < rg["final_median"]


def test_simulate_one_algorithm_vector_values_and_default_t_end(tmp_path: Path) -> None:
    summary = tmp_path / "s.json"
    code, out = _run(
        "simulate",
        "--graph",
        "cycle:8",
        "-a",
        "ARG",
        "--runs",
        "5",
        "--dim",
        "3",
        "--values",
        "gaussian:1",
        "--no-progress",
        "--json",
        str(summary),
    )
    assert code == 0, out
    data = json.loads(summary.read_text())
    assert list(data["algorithms"]) == ["arg"]
    assert data["dim"] == 3
    assert data["t_end"] == pytest.approx(20 / data["quantities"]["theta_arg"], abs=1.0)


def test_options_are_read_from_the_environment(tmp_path: Path) -> None:
    summary = tmp_path / "env.json"
    result = runner.invoke(
        app,
        ["simulate", "--no-progress"],
        env={
            "GOSSIP_GRAPH": "star:6",
            "GOSSIP_RUNS": "3",
            "GOSSIP_T_END": "50",
            "GOSSIP_JSON": str(summary),
        },
    )
    assert result.exit_code == 0, result.output
    data = json.loads(summary.read_text())
    assert data["graph"] == "star:6"
    assert data["algorithms"]["rg"]["runs"] == 3


@pytest.mark.parametrize("cold", [True, False])
def test_a_first_compilation_is_said_once(monkeypatch: pytest.MonkeyPatch, cold: bool) -> None:
    # The probe of numba's cache: tests/gossip/sim/test_simulator_cache.py.
    from continuized.cli._progress import compiling_line
    from continuized.gossip.sim import compiled

    monkeypatch.setattr(compiled, "kernel_compiles", lambda: cold)
    args = ("simulate", "--graph", "line:6", "--runs", "2", "--t-end", "50")
    code, out = _run(*args)
    assert code == 0, out
    assert out.count(compiling_line("the simulator's kernel")) == (1 if cold else 0)
    code, out = _run(*args, "--no-progress")
    assert code == 0, out
    assert "compiling" not in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--graph", "ring:5"], "unknown topology kind 'ring'"),
        (["--graph", "line:1"], "N must be >= 2"),
        (["--algorithm", "nesterov"], "unknown algorithm 'nesterov'"),
        (["--algorithm", "rg", "--algorithm", "rg"], "given twice"),
        (["--runs", "0"], "--runs must be an integer >= 1, got 0"),
        (["--t-end", "0"], "--t-end must be a finite number > 0, got 0.0"),
        (["--t-end", "nan"], "--t-end must be a finite number > 0"),
        (["--grid-points", "1"], "--grid-points must be an integer >= 2, got 1"),
        (["--eps", "-1"], "--eps must be a finite number > 0, got -1.0"),
        (["--values", "zeros"], "unknown initial values 'zeros'"),
        (["--values", "onehot:99"], "node index must be in [0, 4]"),
        (["--dim", "0"], "--dim must be an integer >= 1, got 0"),
        (["--seed", "-2"], "--seed must be an integer >= 0, got -2"),
        (["--workers", "0"], "--workers must be an integer >= 1, got 0"),
        (["--plot", "out.jpg"], "suffix '.jpg'; valid: .png, .pdf, .svg"),
        (["--plot", "."], "is a directory"),
        (["--csv", "."], "is a directory"),
        (["--json", "."], "is a directory"),
        (["--weighted", "--graph", "line:5"], None),
    ],
)
def test_bad_simulate_arguments_exit_2_naming_the_value(
    args: list[str], needle: str | None
) -> None:
    base = ["simulate", "--graph", "line:5", "--runs", "2", "--t-end", "10", "--no-progress"]
    code, out = _run(*base, *args)
    if needle is None:  # a valid combination, for contrast: unit weights are fine
        assert code == 0, out
        return
    assert code == 2, out
    assert "error:" in out
    assert needle in " ".join(out.split())


@pytest.mark.parametrize("args", [["--runs", "abc"], ["--grid-points", "2.5"], ["--t-end", "soon"]])
def test_non_numbers_are_usage_errors(args: list[str]) -> None:
    result = runner.invoke(app, ["simulate", *args], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert f"Invalid value for '{args[0]}'" in result.output
    assert "valid" in result.output.split(args[0], 1)[1]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--runs", "0"], "--runs must be an integer >= 1"),
        (["--grid-points", "0"], "--grid-points must be an integer >= 2"),
        (["--eps", "0"], "--eps must be a finite number > 0"),
        (["--seed", "-1"], "--seed must be an integer >= 0"),
        (["--workers", "0"], "--workers must be an integer >= 1"),
    ],
)
def test_bad_reproduce_arguments(tmp_path: Path, args: list[str], needle: str) -> None:
    code, out = _run("reproduce", "gossip-figure", "--out", str(tmp_path), *args)
    assert code == 2, out
    assert needle in " ".join(out.split())


def test_reproduce_out_must_be_a_directory(tmp_path: Path) -> None:
    afile = tmp_path / "f"
    afile.write_text("x")
    code, out = _run("reproduce", "gossip-figure", "--out", str(afile))
    assert code == 2
    assert "is not a directory" in out


@pytest.mark.slow
def test_reproduce_gossip_figure_small(tmp_path: Path) -> None:
    # The real console script, in its own process, with few runs.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "continuized.cli.app",
            "reproduce",
            "gossip-figure",
            "--out",
            str(tmp_path),
            "--runs",
            "12",
            "--grid-points",
            "40",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "gossip-figure.png").read_bytes()[:4] == b"\x89PNG"
    lines = proc.stdout.splitlines()
    # Every table fits 80 columns (the closing line names paths, which may be longer).
    assert max(len(line) for line in lines if not line.startswith("wrote ")) <= 80, proc.stdout
    # No headline that holds for one panel only: one line per panel, RG's and ARG's t_eps.
    assert not any(line.startswith("ARG reaches eps") for line in lines), proc.stdout
    for spec, stem in (
        ("line:30", "line30"),
        ("grid:15x15", "grid15x15"),
        ("complete:10", "complete10"),
    ):
        data = json.loads((tmp_path / f"gossip-{stem}.json").read_text())
        algos = data["algorithms"]
        row = next(line for line in lines if line.split("│")[1:2] and spec in line.split("│")[1])
        cells = [cell.strip() for cell in row.split("│")[1:-1]]
        expected = [
            "never" if algos[a]["t_eps"] is None else f"{algos[a]['t_eps']:.6g}"
            for a in ("rg", "arg")
        ]
        assert cells[1:3] == expected, row
        if "speedup_t_eps" in data:
            assert cells[3] == f"{data['speedup_t_eps']:.2f}x"
    for stem in ("line30", "grid15x15", "complete10"):
        data = json.loads((tmp_path / f"gossip-{stem}.json").read_text())
        arg, rg = data["algorithms"]["arg"], data["algorithms"]["rg"]
        if stem == "complete10":
            assert arg["final_median"] == pytest.approx(rg["final_median"], rel=1e-6)
        else:
            assert arg["final_median"] < 1e-3 * rg["final_median"]
        assert len((tmp_path / f"gossip-{stem}.csv").read_text().splitlines()) == 41
