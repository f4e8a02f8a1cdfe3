"""Report writers: t_eps, the CSV columns, JSON with nulls, a real PNG."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from continuized.gossip.errors import ConfigError
from continuized.gossip.files.outputs import (
    algorithm_summary,
    plot_gossip_figure,
    t_eps,
    write_csv,
    write_json,
)
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.sim.simulator import SimulationResult


def _result(errors: list[list[float]], algorithm: str = "arg") -> SimulationResult:
    errs = np.array(errors, dtype=np.float64)
    return SimulationResult(
        t_grid=np.arange(errs.shape[1], dtype=np.float64) * 10.0,
        errors=errs,
        params=gossip_params(algorithm, 0.01, 4.0),
        initial_error=float(errs[0, 0]),
        seed=7,
    )


def test_t_eps_is_the_first_grid_time_where_the_median_is_below_eps() -> None:
    r = _result([[1.0, 0.5, 1e-3, 1e-7], [1.0, 0.4, 1e-2, 1e-8], [1.0, 0.1, 1e-7, 1e-9]])
    assert t_eps(r, 1e-2) == 20.0  # medians: 1, 0.4, 1e-3, 1e-8
    assert t_eps(r, 1e-7) == 30.0
    assert t_eps(r, 1e-12) is None
    summary = algorithm_summary(r, 1e-2)
    assert summary["t_eps"] == 20.0
    assert summary["final_median"] == pytest.approx(1e-8)
    assert summary["theta"] == r.params.theta
    assert summary["runs"] == 3
    assert summary["seed"] == 7


def test_csv_has_one_row_per_grid_point(tmp_path: Path) -> None:
    rg = _result([[1.0, 0.5], [1.0, 0.3]], "rg")
    arg = _result([[1.0, 0.2], [1.0, 0.1]], "arg")
    path = tmp_path / "c.csv"
    write_csv(path, {"rg": rg, "arg": arg})
    rows = list(csv.DictReader(path.open()))
    assert [float(r["t"]) for r in rows] == [0.0, 10.0]
    assert float(rows[1]["rg_mean"]) == pytest.approx(0.4)
    assert float(rows[1]["arg_run0"]) == pytest.approx(0.2)
    assert float(rows[1]["arg_q50"]) == pytest.approx(0.15)
    with pytest.raises(ConfigError, match="no results"):
        write_csv(path, {})


def test_json_turns_non_finite_numbers_into_null(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    write_json(path, {"a": float("inf"), "b": [1.0, float("nan")], "c": {"d": None, "e": 2}})
    assert json.loads(path.read_text()) == {"a": None, "b": [1.0, None], "c": {"d": None, "e": 2}}


def test_plot_writes_a_png_even_with_exact_zeros(tmp_path: Path) -> None:
    rg = _result([[1.0, 0.5, 0.1], [1.0, 0.3, 0.0]], "rg")
    arg = _result([[1.0, 0.0, 0.0], [1.0, 0.1, 1e-9]], "arg")
    path = tmp_path / "f.png"
    plot_gossip_figure(path, [("g1", {"rg": rg, "arg": arg}), ("g2", {"rg": rg})], title="t")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000
