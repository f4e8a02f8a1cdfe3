"""RunArchive follows the live run, keeps earlier ones, and exports CSV and JSONL."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

from continuized.coordinator.dashboard.runs import RunArchive, parse_jsonl
from continuized.coordinator.dashboard.synthetic import SyntheticCluster
from continuized.coordinator.figures.records import ErrorPoint, RunSummary
from continuized.coordinator.figures.thinning import CURVE_LIMIT


def test_follow_returns_only_new_points_then_resets_on_a_new_run(
    cluster: SyntheticCluster,
) -> None:
    state = cluster.new_state()
    archive = RunArchive()
    state.record(ErrorPoint(1.0, 0.4, 0.0, 10.0))
    points, reset = archive.follow(state)
    assert reset
    assert points == [(1.0, 0.4, 0.0, 10.0)]
    state.record(ErrorPoint(2.0, 0.3, 1e-12, 11.0))
    state.record(ErrorPoint(3.0, 0.2, 0.0, 12.0))
    points, reset = archive.follow(state)
    assert not reset
    assert [p[0] for p in points] == [2.0, 3.0]
    assert archive.follow(state) == ([], False)

    # The coordinator starts another run (RG, say) in the same process.
    state.run_id = "run-b"
    state.history = [ErrorPoint(0.5, 0.45, 0.0, 20.0)]
    points, reset = archive.follow(state)
    assert reset
    assert [p[0] for p in points] == [0.5]
    assert list(archive.records) == ["run-a", "run-b"]
    assert [p[0] for p in archive.records["run-a"].points] == [1.0, 2.0, 3.0]
    assert not archive.records["run-a"].live
    assert archive.records["run-b"].live


def test_meta_carries_the_theory_line_and_t_eps(cluster: SyntheticCluster) -> None:
    state = cluster.new_state()
    archive = RunArchive()
    state.record(ErrorPoint(1.0, 0.4, 0.0, 10.0))
    state.record(ErrorPoint(2.0, 0.5 * state.eps, 0.0, 11.0))
    archive.follow(state)
    meta = archive.records["run-a"].meta()
    assert meta["algorithm"] == "arg"
    assert meta["theta"] == pytest.approx(cluster.quantities.theta_arg)
    assert meta["bound_factor"] == 2.0
    # onehot on 25 nodes: e0 = 1/2 (1 - 1/25)^2 + 24/2 (1/25)^2 = 1/2 (1 - 1/25)
    assert meta["e0"] == pytest.approx(0.5 * (1 - 1 / 25))
    assert meta["t_eps"] == 2.0
    assert meta["points"] == 2
    assert parse_jsonl(archive.records["run-a"].to_jsonl()).t_eps == 2.0


def test_t_eps_is_the_coordinators_decision(cluster: SyntheticCluster) -> None:
    state = cluster.new_state()
    archive = RunArchive()
    # A point below eps estimated from stale reports does not count as reaching eps.
    state.record(ErrorPoint(1.0, 0.1 * state.eps, 0.0, 10.0), may_reach=False)
    archive.follow(state)
    assert archive.records["run-a"].meta()["t_eps"] is None


def test_csv_and_jsonl_round_trip(cluster: SyntheticCluster) -> None:
    state = cluster.new_state()
    archive = RunArchive()
    for k in range(5):
        state.record(ErrorPoint(float(k), 0.5 / (k + 1), 1e-15 * k, 100.0 + k))
    archive.follow(state)
    record = archive.records["run-a"]
    rows = list(csv.reader(io.StringIO(record.to_csv())))
    assert rows[0] == ["t", "error", "mass_drift_rel", "wall"]
    assert [float(r[1]) for r in rows[1:]] == [0.5 / (k + 1) for k in range(5)]
    lines = record.to_jsonl().splitlines()
    assert json.loads(lines[0])["type"] == "run"
    assert all(json.loads(line)["type"] == "point" for line in lines[1:])
    back = parse_jsonl(record.to_jsonl())
    assert back.points == record.points
    assert back.algorithm == "arg"
    assert back.theta == record.theta


def test_finished_runs_are_saved_and_loaded_by_the_next_archive(
    cluster: SyntheticCluster, tmp_path: Path
) -> None:
    state = cluster.new_state()
    archive = RunArchive(tmp_path)
    state.record(ErrorPoint(1.0, 0.4, 0.0, 10.0))
    archive.follow(state)
    assert not list(tmp_path.iterdir())  # still running: nothing written yet
    state.runs.append(RunSummary("run-a", True, 1.0, 0.5, 100, 390.0, 400.0, 1e-7, 0.0, 0.3, 1.2))
    state.set_phase("done")
    archive.follow(state)
    saved = tmp_path / "run-a.jsonl"
    assert saved.is_file()
    again = RunArchive(tmp_path)
    record = again.records["run-a"]
    assert record.points == [(1.0, 0.4, 0.0, 10.0)]
    assert record.summary is not None
    assert record.summary["rate_achieved"] == 390.0
    assert not record.live


def test_a_corrupt_run_file_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"type": "point", "t": 1}\n')
    (tmp_path / "worse.jsonl").write_text("not json\n")
    assert RunArchive(tmp_path).records == {}


def test_non_finite_values_export_as_null(cluster: SyntheticCluster) -> None:
    state = cluster.new_state()
    archive = RunArchive()
    state.record(ErrorPoint(1.0, math.inf, math.nan, 10.0))
    archive.follow(state)
    line = archive.records["run-a"].to_jsonl().splitlines()[1]
    assert json.loads(line) == {
        "type": "point",
        "t": 1.0,
        "error": None,
        "mass_drift_rel": None,
        "wall": 10.0,
    }


def test_the_exact_curve_is_followed_saved_and_loaded_beside_the_estimates(
    cluster: SyntheticCluster, tmp_path: Path
) -> None:
    state = cluster.new_state()
    archive = RunArchive(tmp_path)
    assert archive.follow_exact(state) == []  # no live record yet
    state.record(ErrorPoint(1.0, 0.4, 0.0, 10.0))
    state.exact.append(ErrorPoint(0.0, 0.48, 0.0, 10.5))
    archive.follow(state)
    assert archive.follow_exact(state) == [(0.0, 0.48, 0.0, 10.5)]
    assert archive.follow_exact(state) == []
    # The final reports complete the last grid times after the run is done: saved all the same.
    state.runs.append(RunSummary("run-a", True, 1.0, 0.5, 100, 390.0, 400.0, 1e-7, 0.0, 0.3, 1.2))
    state.set_phase("done")
    archive.follow(state)
    state.exact.append(ErrorPoint(2.0, 0.2, 1e-16, 11.0))
    assert archive.follow_exact(state) == [(2.0, 0.2, 1e-16, 11.0)]
    again = RunArchive(tmp_path)
    record = again.records["run-a"]
    assert record.points == [(1.0, 0.4, 0.0, 10.0)]
    assert record.exact == [(0.0, 0.48, 0.0, 10.5), (2.0, 0.2, 1e-16, 11.0)]
    # A new run: its exact curve starts empty.
    state.run_id = "run-b"
    state.history = [ErrorPoint(0.5, 0.45, 0.0, 20.0)]
    state.exact = [ErrorPoint(0.0, 0.5, 0.0, 20.0)]
    archive.follow(state)
    assert archive.follow_exact(state) == [(0.0, 0.5, 0.0, 20.0)]
    assert archive.records["run-a"].exact == [(0.0, 0.48, 0.0, 10.5), (2.0, 0.2, 1e-16, 11.0)]


def test_a_long_runs_state_and_dashboard_archive_stay_bounded(cluster: SyntheticCluster) -> None:
    state = cluster.new_state()
    archive = RunArchive()
    total = 3 * CURVE_LIMIT + 17
    followed: list[float] = []
    for k in range(total):
        point = ErrorPoint(float(k), 1.0 / (k + 1), 0.0, float(k))
        state.record(point)
        state.add_exact([point])
        if k % 7 == 0 or k == total - 1:
            new, reset = archive.follow(state)
            assert not reset or k == 0
            followed += [p[0] for p in new]
            archive.follow_exact(state)
    assert len(state.history) <= CURVE_LIMIT
    assert len(state.exact) <= CURVE_LIMIT
    assert len(state.history) + state.history_dropped == total
    assert len(state.exact) + state.exact_dropped == total
    assert state.history[0].t == 0.0  # the start stays: the divergence check measures from it
    assert state.history[-1].t == total - 1
    assert followed == [float(k) for k in range(total)]
    live = archive.live
    assert live is not None
    assert len(live.points) <= CURVE_LIMIT
    assert len(live.exact) <= CURVE_LIMIT
    assert live.stored() == 2 * total
