"""What `gossip up` prints about a run (cli._cluster_view)."""

from __future__ import annotations

import dataclasses

import pytest

from cli._cluster_view import fell_behind, print_summary
from coordinator.config import CoordinatorConfig
from coordinator.records import RunSummary
from coordinator.state import ClusterState

BASE = RunSummary("run-a", True, 1.0, 0.5, 100, 390.0, 400.0, 1e-7, 0.0, 0.3, 1.2)


def _summary(**figures: float) -> RunSummary:
    return dataclasses.replace(BASE, **figures)  # type: ignore[arg-type]


def test_falling_behind_is_said_with_the_ticks_wait() -> None:
    text = fell_behind(_summary(lag_p50=0.0, lag_p99=3.0, wait_p50=42.0, wait_p99=310.0), 8000, 30)
    assert "ticks waited 42 t to start (median; p99 310 t)" in text
    assert "1 x the 15 t between two activations" in text
    assert "--nodes-per-process" in text


def test_nodes_that_report_no_wait_are_judged_on_their_lag() -> None:
    text = fell_behind(_summary(lag_p50=53.0, lag_p99=120.0), 4000, 30)
    assert "waited 53 t to start (median; p99 120 t)" in text


def _printed(summary: RunSummary, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """The summary table's rows, quantity -> value."""
    state = ClusterState(graph="line:30", expected=30, eps=1e-6, rate=400.0)
    print_summary(summary, state, CoordinatorConfig(graph="line:30", until=1e-6))
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    return rows


def test_the_summary_shows_the_exact_t_eps_and_the_estimates_apart(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = _printed(_summary(t_eps=3375.0, wall_s=0.675, t_eps_estimate=6019.0), capsys)
    assert rows["t to eps (exact curve)"] == "3375.0"
    assert rows["wall time to eps (s)"] == "0.68"
    assert rows["t to eps (estimate)"] == "6019.0"
    assert rows["final error"] == "1.000e-07"


def test_a_figure_that_was_not_measured_reads_unknown_never_a_false_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    note = "not collected: an optimization run's nodes send no trace"
    rows = _printed(
        dataclasses.replace(
            BASE, t_eps=None, wall_s=None, final_error=None, mass_drift_rel=None, exact_note=note
        ),
        capsys,
    )
    assert rows["t to eps (exact curve)"] == "unknown"  # reached, but with no exact curve
    assert rows["t to eps (estimate)"] == "not yet at the stop"
    assert rows["final error"] == "unknown"
    assert rows["exact curve points"].startswith("not collected")
    rows = _printed(dataclasses.replace(BASE, reached=False, t_eps=None, wall_s=None), capsys)
    assert rows["t to eps (exact curve)"] == "not reached"
    assert rows["t to eps (estimate)"] == "not reached"
