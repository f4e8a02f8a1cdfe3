"""``gossip graph info``: the quantities as a table or JSON, and clear errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from continuized.cli.app import app

runner = CliRunner()


def test_graph_info_json_matches_the_reference_values() -> None:
    result = runner.invoke(app, ["graph", "info", "grid:15x15", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["n"] == 225
    assert data["n_edges"] == 420
    assert data["mu_gossip"] == pytest.approx(1.0406e-4, rel=2e-4)
    assert data["r_max"] == pytest.approx(293.02, rel=1e-4)
    assert data["theta_arg"] == pytest.approx(4.214e-4, rel=2e-4)


def test_graph_info_table() -> None:
    result = runner.invoke(app, ["graph", "info", "line:30"])
    assert result.exit_code == 0
    assert "theta_arg" in result.output
    assert "0.002552" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["cube:3"], "unknown topology kind 'cube'"),
        (["er:20:0.01:0"], "disconnected"),
        (["line:5", "--method", "magic"], "--method must be auto, dense or sparse"),
    ],
)
def test_graph_info_bad_arguments(args: list[str], needle: str) -> None:
    result = runner.invoke(app, ["graph", "info", *args])
    assert result.exit_code == 2
    assert needle in " ".join(result.output.split())
