"""Tables fit 80 columns whole (simulate, graph info, up summary); no cell ends in '…'."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from continuized.cli._tables import figures_table
from continuized.cli.app import app

ELLIPSIS = "\N{HORIZONTAL ELLIPSIS}"


def _table_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line[:1] in "┏┃┡│└┌├"]


def _fits(out: str) -> None:
    assert ELLIPSIS not in out, out
    lines = _table_lines(out)
    assert lines, out
    assert max(len(line) for line in lines) <= 80, out


def test_a_figure_too_wide_is_folded_never_cut() -> None:
    table = figures_table("narrow", ["name", "figure"])
    table.add_row("x", "6.01612345678901e-05")
    buffer = io.StringIO()
    Console(file=buffer, width=16, color_system=None).print(table)
    out = buffer.getvalue()
    assert ELLIPSIS not in out
    # Every digit is there, over several lines.
    assert "6.01612345678901e-05" in "".join(
        line.split("│")[2].strip() for line in _table_lines(out) if line.count("│") == 3
    )


def test_simulate_table_fits_80_columns(tmp_path: Path) -> None:
    summary = tmp_path / "s.json"
    result = CliRunner().invoke(
        app,
        ["simulate", "--graph", "line:12", "--runs", "8", "--no-progress", "--json", str(summary)],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    _fits(result.output)
    for name, a in json.loads(summary.read_text())["algorithms"].items():
        row = next(line for line in result.output.splitlines() if line.startswith(f"│ {name} "))
        assert f"{a['final_median']:.3e}" in row
        assert f"{a['final_mean']:.3e}" in row


def test_graph_info_table_fits_80_columns() -> None:
    result = CliRunner().invoke(app, ["graph", "info", "grid:15x15"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    _fits(result.output)
    assert "0.000104059" in result.output


def test_up_summary_fits_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from continuized.cli._cluster_view import print_failure, print_summary
    from continuized.coordinator.figures.records import RunSummary
    from continuized.coordinator.local.supervise import Supervision
    from continuized.coordinator.run.config import CoordinatorConfig, prepare

    monkeypatch.setenv("COLUMNS", "80")
    config = CoordinatorConfig(graph="grid:4x4", values="onehot", rate=20.0)
    state, _plan = prepare(config)
    summary = RunSummary(
        "20261127T094237-def8df", False, None, None, 114, 21.94689263529055, 20.0,
        0.0022275554659136575, 0.0, 1.2164711952209473, 5.381628274917602, "timeout",
        0.0, 0.0, 0.011773853071346707, 0.06579064354323631, True,
    )  # fmt: skip
    sup = Supervision(3)
    sup.failed(
        "timeout: the error did not reach 1e-06 within --timeout 5 s (final error "
        "0.0022275554659136575)"
    )
    print_summary(summary, state, config, sup)
    print_failure(sup, state, config)
    out = capsys.readouterr().out
    _fits(out)
    assert "2.228e-03" in out
    assert "22 / 20" in out
