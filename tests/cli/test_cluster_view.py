"""What `gossip up` prints about a run (cli._cluster_view)."""

from __future__ import annotations

import dataclasses

from cli._cluster_view import fell_behind
from coordinator.records import RunSummary

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
