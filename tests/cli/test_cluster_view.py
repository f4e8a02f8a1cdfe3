"""What `gossip up` prints about a run (cli._cluster_view)."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from continuized.cli._cluster_view import fell_behind, print_summary, starts_in, timeout_advice
from continuized.coordinator.figures.records import ErrorPoint, RunSummary
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.run.config import CoordinatorConfig, prepare

BASE = RunSummary("run-a", True, 1.0, 0.5, 100, 390.0, 400.0, 1e-7, 0.0, 0.3, 1.2)


def _summary(**figures: float | bool | None) -> RunSummary:
    return dataclasses.replace(BASE, **figures)  # type: ignore[arg-type]


def test_falling_behind_is_said_with_the_ticks_wait() -> None:
    text = fell_behind(_summary(lag_p50=0.0, lag_p99=3.0, wait_p50=42.0, wait_p99=310.0), 8000, 30)
    assert "ticks waited 42 t to start (median; p99 310 t)" in text
    assert "1 x the 15 t between two activations" in text
    assert "--nodes-per-process" in text


def test_nodes_that_report_no_wait_are_judged_on_their_lag() -> None:
    text = fell_behind(_summary(lag_p50=53.0, lag_p99=120.0), 4000, 30)
    assert "waited 53 t to start (median; p99 120 t)" in text


def test_before_t_starts_the_status_counts_down_instead_of_a_negative_t() -> None:
    # The epoch (t = 0) is set a few seconds ahead: the nodes' first reports come before it.
    assert starts_in(1000.0, 991.0) == "starts in 9 s"
    assert starts_in(1000.0, 999.2) == "starts in 1 s"  # never "starts in 0 s"
    assert starts_in(1000.0, 1000.0) is None  # started: the status shows t
    assert starts_in(None, 5.0) is None  # no epoch yet (registering): nothing to count


def _timed_out_state(rate: float, t_end: float) -> ClusterState:
    """The state of an averaging run on line:8 that stopped at ``t_end``, short of 1e-6."""
    state, _plan = prepare(CoordinatorConfig(graph="line:8", values="onehot", rate=rate))
    state.history += [ErrorPoint(0.0, 0.4375, 0.0, 0.0), ErrorPoint(t_end, 1e-3, 0.0, 1.0)]
    return state


def test_a_cluster_that_kept_up_and_timed_out_is_told_to_raise_the_rate() -> None:
    state = _timed_out_state(20.0, 100.0)
    timed_out = _summary(reached=False, rate_asked=20.0, rate_achieved=19.0, kept_up=True)
    text = timeout_advice(timed_out, state, 5.0)
    assert "kept up with --rate 20 (19/s achieved), but t only reached 100 in 5 s" in text
    assert "higher --rate" in text
    assert "lower --rate" not in text
    # The t still needed is where the theorem's bound 2 e0 exp(-theta t) falls to eps.
    assert state.params is not None
    need = math.log(2 * 0.4375 / 1e-6) / state.params.theta
    assert f"reaches 1e-06 at t = {need:.0f}" in text
    assert f"about {need / 5.0:.0f}/s for --timeout 5" in text
    assert f"about {need / 20.0:.0f} s at this rate" in text


def test_a_cluster_that_fell_behind_and_timed_out_is_told_to_lower_the_rate() -> None:
    state = _timed_out_state(8000.0, 100.0)
    for behind in (
        _summary(reached=False, rate_asked=8000.0, rate_achieved=7900.0, kept_up=False),
        # No node reported its wait: the achieved rate says it.
        _summary(reached=False, rate_asked=8000.0, rate_achieved=2000.0, kept_up=None),
    ):
        text = timeout_advice(behind, state, 5.0)
        assert "fell behind --rate 8000" in text
        assert "lower --rate" in text
        assert "higher --rate" not in text


def test_gossip_up_that_times_out_at_a_low_rate_advises_a_higher_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    env.update(TMPDIR=str(tmp_path), COLUMNS="200")
    args = [
        "up", "--graph", "line:8", "--rate", "20", "--timeout", "3",
        "--quiet", "--insecure", "--metrics-file", "m.jsonl",
    ]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "continuized.cli.app", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    error = next(line for line in result.stderr.splitlines() if line.startswith("error:"))
    if "fell behind" in error:  # the shared machine was too loaded even for 20/s
        pytest.skip(f"the cluster fell behind 20/s on this machine: {error}")
    assert "higher --rate" in error
    assert "lower --rate" not in error
    advised = re.search(r"about (\d+)/s for --timeout 3", error)
    assert advised is not None, error
    assert int(advised.group(1)) > 20


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


def test_a_run_that_measured_nothing_reads_unknown_and_says_what_came(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # What a loaded 1,024-node run looked like: one node's report, no final report, no point.
    names = tuple(f"node-{k}" for k in range(1024))
    nothing = dataclasses.replace(
        BASE,
        reached=False,
        t_eps=None,
        wall_s=None,
        activations=1,
        rate_achieved=None,
        final_error=None,
        mass_drift_rel=None,
        rtt_p50_ms=None,
        rtt_p99_ms=None,
        missing_finals=names,
        members=1024,
        reported=1,
        timed=0,
        finals_wait_s=10.0,
    )
    rows = _printed(nothing, capsys)
    assert rows["activations"] == "1 (at least: reports from 1 of 1024 nodes)"
    assert rows["rate achieved / asked (1/s)"] == "unknown / 400"
    assert rows["round trip p50 / p99 (ms)"] == "unknown / unknown (no node measured it)"
    assert rows["tick wait p50 / p99 (t)"] == "unknown / unknown (no node measured it)"
    assert "kept up" not in rows["tick wait p50 / p99 (t)"]
    assert rows["final reports"] == "none of 1024 within 10.0 s of the stop"
    assert rows["final reports missing"].startswith("1024 (node-0, ")
    assert "whether the cluster kept up with --rate 400 is unknown" in timeout_advice(
        nothing, ClusterState(graph="line:30", expected=30, eps=1e-6, rate=400.0), 20.0
    )


def test_figures_from_part_of_the_nodes_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    part = _summary(wait_p50=3.0, wait_p99=9.0, kept_up=True, members=30, reported=30, timed=12)
    rows = _printed(dataclasses.replace(part, finals_wait_s=14.25), capsys)
    assert rows["activations"] == "100"
    assert rows["tick wait p50 / p99 (t)"] == "3.00 / 9.00: kept up (from 12 of 30 nodes)"
    assert rows["final reports"] == "30 of 30, the last 14.2 s after the stop"


def test_a_training_summary_names_its_target_and_its_rates_per_node_and_network(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from continuized.coordinator.figures.records import NodeView
    from continuized.coordinator.figures.train_measure import TrainTracker
    from continuized.gossip.train.recipe import Recipe

    recipe = Recipe("softmax", "iris", "iid:0", rate_com=1.0, lr=0.1)
    state = ClusterState(graph="cycle:4", expected=4, eps=1e-6, rate=20.0)
    state.training = TrainTracker(recipe, recipe.problem("cycle:4"), target=0.9)
    for k in range(4):  # 40 t at 20/s: 2 s, and each node took 38 or 42 steps
        state.nodes[k] = NodeView(k, t=40.0, gradient_steps=38 + 4 * (k % 2))
    # 38 exchanges/s achieved; the model asks 20 * 4 * 1 / 2 = 40.
    summary = _summary(t_eps=12.5, wall_s=0.625, rate_achieved=38.0, rate_asked=20.0)
    print_summary(summary, state, CoordinatorConfig(graph="cycle:4", rate=20.0))
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) == 2:
            rows[cells[0]] = cells[1]
    assert rows["reached accuracy"] == "True (--until-accuracy 0.9)"
    assert rows["t to accuracy 0.9 (exact curve)"] == "12.5"
    assert rows["wall time to accuracy 0.9 (s)"] == "0.62"
    assert rows["steps/s per node (achieved / asked)"] == "20.0 / 20"
    assert rows["exchanges/s in all (achieved / asked)"] == "38 / 40"
    assert not any(re.search(r"\beps\b", key) for key in rows), rows
