"""The header's figures (views.headline), the optimization rows of the feed, and which runs the
page draws together."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from continuized.coordinator.dashboard.feed import OPT_ROWS, Feed, opt_view
from continuized.coordinator.dashboard.prometheus import make_registry
from continuized.coordinator.dashboard.runs import RunArchive, RunRecord
from continuized.coordinator.dashboard.server import Dashboard
from continuized.coordinator.dashboard.synthetic import SyntheticCluster
from continuized.coordinator.dashboard.views import headline
from continuized.coordinator.figures.optimization import OptPoint, OptTask, OptTracker
from continuized.coordinator.figures.records import ErrorPoint, FinalResult, RunSummary
from continuized.coordinator.figures.state import ClusterState


def _tracker() -> OptTracker:
    task = OptTask(
        problem="logistic:0.01",
        data="synthetic:0",
        split="iid:0",
        dim=2,
        mu=1.0,
        L=1.0,
        eta=0.1,
        c=2.0,
        theta=0.05,
        steps=(0.5,),
        params={"eta": 0.1},
        x_star=np.array([1.0, 1.0]),
        value_star=0.0,
    )
    return OptTracker(task)


def _finish(state: ClusterState, drift: float = 2.2e-16) -> RunSummary:
    """End ``state``'s run the way the coordinator does: final result, run summary, done."""
    summary = RunSummary(
        run_id=state.run_id,
        reached=True,
        t_eps=state.t * 0.9,
        wall_s=1.5,
        activations=4321,
        rate_achieved=391.5,
        rate_asked=state.rate,
        final_error=1.25e-11,
        mass_drift_rel=drift,
        rtt_p50_ms=0.5,
        rtt_p99_ms=2.0,
        stop_reason="reached",
    )
    state.final = FinalResult(state.t + 7.5, 1.25e-11, drift, (), (0.5,), True)
    state.runs.append(summary)
    for view in state.nodes.values():
        view.final = True
    state.set_phase("done")
    return summary


def test_headline_shows_the_exact_drift_not_the_estimate(cluster: SyntheticCluster) -> None:
    state = cluster.new_state()
    cluster.feed(state)
    now = time.time()
    # Before any exact point the drift is unknown, whatever the estimate says.
    state.record(ErrorPoint(state.t + 1.0, 0.01, 3.61e-6, now))
    figures = headline(state, now, rate_live=None)
    assert figures["mass_drift_rel"] is None
    assert figures["drift_source"] == ""
    state.exact.append(ErrorPoint(state.t - 2.0, 0.02, 1.1e-16, now))
    figures = headline(state, now, rate_live=402.0)
    assert figures["mass_drift_rel"] == 1.1e-16
    assert figures["drift_source"] == "exact curve"
    assert figures["rate_achieved"] == 402.0
    assert figures["finished"] is False
    assert figures["points"] == 1  # the exact curve's
    assert figures["t"] == state.t  # the latest estimate while the run goes on
    assert figures["problem"] == ""


def _drift_gauge(state: ClusterState) -> list[float]:
    text = generate_latest(make_registry(state)).decode()
    return [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gossip_mass_drift_rel"
    ]


def test_the_drift_gauge_of_metrics_is_the_exact_one(cluster: SyntheticCluster) -> None:
    state = cluster.new_state()
    cluster.feed(state)
    now = time.time()
    state.record(ErrorPoint(state.t + 1.0, 0.01, 3.61e-6, now))
    assert _drift_gauge(state) == []  # unknown: left out, not the estimate
    state.exact.append(ErrorPoint(state.t - 2.0, 0.02, 1.1e-16, now))
    assert _drift_gauge(state) == [1.1e-16]
    _finish(state, drift=2.2e-16)
    assert _drift_gauge(state) == [2.2e-16]


def test_headline_of_a_finished_run_is_its_summary(cluster: SyntheticCluster) -> None:
    state = cluster.new_state()
    cluster.feed(state)
    now = time.time()
    state.exact.extend(ErrorPoint(float(k), 0.1, 0.0, now) for k in range(5))
    state.record(ErrorPoint(state.t + 1.0, 0.01, 3.49e-7, now))
    summary = _finish(state)
    figures = headline(state, now + 10.0, rate_live=0.0)
    assert state.final is not None
    assert figures["finished"] is True
    assert figures["t"] == state.final.t
    assert figures["error"] == summary.final_error
    assert figures["mass_drift_rel"] == summary.mass_drift_rel
    assert figures["drift_source"] == "final reports"
    assert figures["rate_achieved"] == summary.rate_achieved
    assert figures["activations"] == summary.activations
    assert figures["t_eps"] == summary.t_eps
    assert figures["points"] == 5
    assert figures["nodes_final"] == state.expected
    assert figures["stop_reason"] == "reached"


def test_an_optimization_runs_drift_is_unknown_until_the_stop(cluster: SyntheticCluster) -> None:
    state = cluster.new_state()
    state.optimization = _tracker()
    cluster.feed(state)  # its history point carries an estimated dual drift
    figures = headline(state, time.time(), rate_live=None)
    assert figures["mass_drift_rel"] is None
    assert figures["problem"] == "logistic:0.01"
    assert figures["algorithm"] == "acd"
    assert figures["points"] == len(state.history)
    _finish(state, drift=1.0e-15)
    assert headline(state, time.time(), None)["mass_drift_rel"] == 1.0e-15


def test_the_objective_gap_reaches_the_page_over_the_whole_run(
    cluster: SyntheticCluster,
) -> None:
    state = cluster.new_state()
    tracker = state.optimization = _tracker()
    feed = Feed(state, RunArchive())
    cluster.feed(state)
    feed.tick(time.time())  # the run starts: the page loads a snapshot
    rows = [OptPoint(float(k), 1.0 / (k + 1), 0.5 / (k + 1), 0.1, 0.0, 0.0) for k in range(5000)]
    tracker.history.extend(rows[:4000])
    batch = feed.tick(time.time())
    assert [r[0] for r in batch["opt"]] == [float(k) for k in range(4000)]
    tracker.history.extend(rows[4000:])
    assert [r[0] for r in feed.tick(time.time())["opt"]] == [float(k) for k in range(4000, 5000)]
    assert feed.tick(time.time())["opt"] == []
    # A snapshot thins a long run evenly, from its first row to its last, never cuts it.
    view = opt_view(state, feed.opt_sent)
    assert view is not None
    ts = [r[0] for r in view["history"]]
    assert len(ts) <= OPT_ROWS + 1
    assert ts[0] == 0.0
    assert ts[-1] == 4999.0
    assert max(np.diff(ts)) <= 3.0


def test_runs_of_another_kind_are_not_drawn_with_the_live_run(
    tmp_path: Path, cluster: SyntheticCluster
) -> None:
    graph = cluster.topology.spec
    earlier = {
        "arg-before": RunRecord("arg-before", graph=graph, algorithm="arg"),
        "acd-before": RunRecord("acd-before", graph=graph, algorithm="acd", problem="ridge:0.1"),
        "acd-same": RunRecord("acd-same", graph=graph, algorithm="acd", problem="logistic:0.01"),
    }
    for record in earlier.values():
        record.points.append((1.0, 0.5, 0.0, 1.0))
        (tmp_path / f"{record.run_id}.jsonl").write_text(record.to_jsonl())
    # A file written before runs named their problem: an optimization run of unknown problem.
    old = json.loads(earlier["acd-same"].to_jsonl().splitlines()[0])
    del old["problem"]
    old["run_id"] = "acd-old"
    (tmp_path / "acd-old.jsonl").write_text(json.dumps(old) + "\n")

    gossip = cluster.new_state()
    cluster.feed(gossip)
    dash = Dashboard(gossip, runs_dir=tmp_path, band_runs=0)
    dash.feed.tick(time.time())
    drawn = {r["run_id"] for r in dash.page_snapshot(time.time())["runs"]}
    assert drawn == {"arg-before", gossip.run_id}

    optimizing = SyntheticCluster(graph, "arg", rate=400.0, seed=5, run_id="acd-live")
    state = optimizing.new_state()
    state.optimization = _tracker()
    optimizing.feed(state)
    dash = Dashboard(state, runs_dir=tmp_path, band_runs=0)
    dash.feed.tick(time.time())
    drawn = {r["run_id"] for r in dash.page_snapshot(time.time())["runs"]}
    assert drawn == {"acd-same", "acd-live"}
