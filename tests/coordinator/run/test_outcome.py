"""The outcome of a run (coordinator.run.outcome): the achieved rate, from reports that are not
simultaneous, and the summary's figures: the exact t_eps, the estimate's apart."""

from __future__ import annotations

import numpy as np
import pytest

from continuized.coordinator.figures.records import ErrorPoint, NodeView
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.membership.plan import Plan
from continuized.coordinator.run.outcome import (
    final_result,
    node_shares,
    pace_of,
    rate_achieved,
    run_summary,
)
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import Topology, parse_topology
from continuized.gossip.model.algorithms import gossip_params


def reports(topo: Topology, times: np.ndarray, achieved: float, seed: int = 0) -> list[NodeView]:
    """Each node's latest report at its own t: its edges' counts of a Poisson run whose clocks
    ran at ``achieved`` times the asked rate (both ends of an edge count the same events)."""
    rng = np.random.default_rng(seed)
    horizon = float(times.max())
    events = [
        np.sort(rng.uniform(0.0, horizon, rng.poisson(achieved * p * horizon))) for p in topo.probs
    ]
    return [
        NodeView(
            node=v,
            t=float(times[v]),
            edges={
                peer: int(np.searchsorted(events[e], times[v], side="right"))
                for e, peer in topo.incident(v)
            },
        )
        for v in range(topo.n)
    ]


def test_each_nodes_share_is_its_edges_probability_and_they_sum_to_two() -> None:
    topo = parse_topology("star:4")  # centre 0 on every edge
    shares = node_shares(topo)
    assert shares[0] == pytest.approx(1.0)
    assert shares[1:] == pytest.approx([1 / 3] * 3)
    assert sum(node_shares(parse_topology("grid:5x5"))) == pytest.approx(2.0)


@pytest.mark.parametrize("achieved", [1.0, 0.8])
@pytest.mark.parametrize("spec", ["line:30", "star:12"])
def test_reports_of_scattered_times_give_the_rate_the_clocks_ran_at(
    spec: str, achieved: float
) -> None:
    topo = parse_topology(spec)
    rng = np.random.default_rng(1)
    times = rng.uniform(40_000.0, 100_000.0, topo.n)  # the latest reports, far apart
    times[np.argmax(node_shares(topo))] = 30_000.0  # the busiest node reported long ago
    views = reports(topo, times, achieved)
    got = rate_achieved(1000.0, pace_of(views, node_shares(topo)))
    assert got == pytest.approx(1000.0 * achieved, rel=0.02)
    # The sum of the counts paired with one common t, here the reports' earliest (as a
    # consistent cut that lags them would be), overstates the rate by far.
    earliest = rate_achieved(
        1000.0, (float(times.min()), sum(sum(v.edges.values()) for v in views) // 2)
    )
    assert earliest > 1.2 * 1000.0 * achieved


def test_nodes_that_joined_since_are_left_out_of_both_sums() -> None:
    topo = parse_topology("line:4")
    views = reports(topo, np.full(topo.n, 50_000.0), 1.0)
    alone = pace_of(views, node_shares(topo))
    joined = NodeView(node=9, t=1e9, edges={0: 10**9})
    assert pace_of([*views, joined], node_shares(topo)) == alone
    assert pace_of([], node_shares(topo)) == (0.0, 0)


def _stopped_state() -> tuple[ClusterState, Plan]:
    topo = parse_topology("line:2")
    q = graph_quantities(topo)
    params = gossip_params("arg", q.mu_gossip, q.r_max)
    plan = Plan(topo, params, "test", 100.0, "", 0.1)
    state = ClusterState(graph="line:2", expected=2, eps=1e-6, rate=100.0, epoch=1000.0)
    state.initial = [(1.0,), (0.0,)]
    return state, plan


def test_the_summary_names_the_exact_crossing_and_the_estimates_apart() -> None:
    state, plan = _stopped_state()
    state.exact = [ErrorPoint(float(t), 1e-7, 0.0, 1000.0 + t) for t in (10, 20, 30)]
    state.mark_estimate(45.0, 1000.9)
    state.mark_reached(10.0, 1000.0 + 10.0 / 100.0)
    summary = run_summary(state, plan, None, (0.0, 0), "reached")
    assert summary.reached
    assert summary.t_eps == 10.0
    assert summary.wall_s == 0.1  # t_eps / rate: when the clocks passed it
    assert summary.t_eps_estimate == 45.0
    assert summary.wall_s_estimate == pytest.approx(0.9)
    assert summary.exact_points == 3
    assert summary.exact_note == ""
    # The final figures were not measured (no final reports): unknown, not a stand-in.
    assert summary.final_error is None
    assert summary.mass_drift_rel is None
    out = summary.as_dict()
    assert (out["t_eps"], out["t_eps_estimate"], out["exact_points"]) == (10.0, 45.0, 3)


def test_without_an_exact_curve_t_eps_is_unknown_and_the_summary_says_why() -> None:
    state, plan = _stopped_state()
    state.mark_estimate(45.0, 1000.9)
    state.mark_reached(None, None)
    state.exact_note = "not collected: an optimization run's nodes send no trace"
    summary = run_summary(state, plan, None, (0.0, 0), "reached")
    assert summary.reached
    assert summary.t_eps is None
    assert summary.wall_s is None
    assert summary.t_eps_estimate == 45.0
    assert summary.exact_points == 0
    assert summary.exact_note.startswith("not collected")


def test_a_missing_final_report_makes_the_final_figures_unknown_and_is_named() -> None:
    state, plan = _stopped_state()
    state.registered = {"left": 0, "right": 1}
    # Both reported, one of them finally: mixed together they give figures, but not measured
    # ones (the other's exchanges were still in flight).
    state.nodes[0] = NodeView(node=0, t=50.0, x=(0.5,), z=(0.5,), final=True)
    state.nodes[1] = NodeView(node=1, t=49.0, x=(0.49,), z=(0.5,), final=False)
    final = final_result(state, plan, 48.0)
    assert final is not None
    assert not final.complete
    summary = run_summary(state, plan, final, (0.0, 0), "reached")
    assert summary.missing_finals == ("right",)
    assert summary.final_error is None
    assert summary.mass_drift_rel is None
    assert summary.as_dict()["missing_finals"] == ["right"]
    state.nodes[1] = NodeView(node=1, t=50.0, x=(0.5,), z=(0.5,), final=True)
    complete = run_summary(state, plan, final_result(state, plan, 48.0), (0.0, 0), "reached")
    assert complete.missing_finals == ()
    assert complete.mass_drift_rel is not None
    assert complete.mass_drift_rel == pytest.approx(0.0, abs=1e-12)


def test_a_run_with_no_measurement_has_unknown_figures_not_zeros() -> None:
    # The 1,024-node case: one node's early report (no exchange of its own completed, so its
    # percentiles are null), the others never heard from, no point while the nodes ran.
    state, plan = _stopped_state()
    state.nodes[0] = NodeView(node=0, t=5.0, x=(1.0,), z=(1.0,), edges={1: 1}, reports=1)
    summary = run_summary(state, plan, None, (0.0, 0), "timeout", finals_wait_s=60.0)
    assert summary.rate_achieved is None
    assert summary.rtt_p50_ms is None
    assert summary.wait_p50 is None
    assert summary.kept_up is None
    assert (summary.members, summary.reported, summary.timed) == (2, 1, 0)
    assert summary.as_dict()["rate_achieved"] is None
    assert summary.as_dict()["finals_wait_s"] == 60.0
    assert summary.as_dict()["ready_after_s"] is None  # the state never saw its nodes ready


def test_the_summary_says_when_every_node_was_ready() -> None:
    state, plan = _stopped_state()
    state.ready_after_s = 4.5  # the enrollment's, at the bootstrap
    assert run_summary(state, plan, None, (0.0, 0), "timeout").as_dict()["ready_after_s"] == 4.5


def test_the_summary_says_how_soon_after_t_0_the_nodes_exchanged() -> None:
    state, plan = _stopped_state()  # epoch 1000
    state.nodes[0] = NodeView(node=0, first_exchange=1000.25, reports=1)
    state.nodes[1] = NodeView(node=1, reports=1)
    half = run_summary(state, plan, None, (0.0, 0), "timeout").as_dict()
    assert (half["first_exchange_s"], half["all_exchanged_s"]) == (0.25, None)  # 1 unknown
    state.nodes[1].first_exchange = 1000.75
    whole = run_summary(state, plan, None, (0.0, 0), "timeout").as_dict()
    assert (whole["first_exchange_s"], whole["all_exchanged_s"]) == (0.25, 0.75)


def test_the_percentiles_say_how_many_nodes_measured_them() -> None:
    state, plan = _stopped_state()
    state.nodes[0] = NodeView(node=0, t=50.0, reports=3, rtt_p50_ms=2.0, wait_p50=1.0)
    state.nodes[1] = NodeView(node=1, t=50.0, reports=3)  # reported, measured nothing
    summary = run_summary(state, plan, None, (50.0, 50), "timeout")
    assert summary.rtt_p50_ms == 2.0  # the one node that measured it, not a median with a 0
    assert (summary.reported, summary.timed) == (2, 1)
    assert summary.rate_achieved == pytest.approx(100.0)


def test_a_training_runs_record_names_its_target_and_rates_and_an_averaging_run_keeps_eps() -> None:
    import dataclasses

    from continuized.coordinator.figures.records import RunSummary
    from continuized.coordinator.run.config import CoordinatorConfig, prepare
    from continuized.coordinator.run.outcome import TRAINING_KEYS, summary_record
    from continuized.gossip.train.recipe import Recipe

    summary = RunSummary("r", True, 12.5, 0.625, 100, 38.0, 20.0, None, None, None, None)
    averaging = CoordinatorConfig(graph="cycle:4", rate=20.0)
    state, plan = prepare(averaging)
    record = summary_record(averaging, plan, state, summary, None, "reached")
    assert {"t_eps", "eps", "rate_achieved", "rate_asked"} <= record.keys()
    assert "target" not in record

    recipe = Recipe("softmax", "iris", "iid:0", rate_com=2.0)
    training = dataclasses.replace(averaging, training=recipe, until_accuracy=0.9)
    state, plan = prepare(training)
    for k in range(4):  # 40 t at 20/s, 40 gradient steps each
        state.nodes[k] = NodeView(k, t=40.0, gradient_steps=40)
    record = summary_record(training, plan, state, summary, None, "reached")
    assert not ({*TRAINING_KEYS, "eps"} & record.keys())
    assert record["target"] == {"accuracy": 0.9}
    assert record["t_target"] == 12.5
    assert record["rate_per_node_asked"] == 20.0
    assert record["rate_per_node_achieved"] == pytest.approx(20.0)
    assert record["rate_network_achieved"] == 38.0
    assert record["rate_network_asked"] == 20.0 * 4 * 2.0 / 2  # rate-com 2 per node

    training = dataclasses.replace(training, until_accuracy=None, until=1e-3)
    state, plan = prepare(training)
    record = summary_record(training, plan, state, summary, None, "reached")
    assert record["target"] == {"error": 1e-3}
    assert record["rate_per_node_achieved"] is None  # no node reported its steps
