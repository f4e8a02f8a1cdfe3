"""ClusterState: derived values and a JSON-ready snapshot."""

from __future__ import annotations

import json
import math

from continuized.coordinator.figures.records import ErrorPoint, NodeView
from continuized.coordinator.figures.state import ClusterState
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params


def _state() -> ClusterState:
    topo = parse_topology("line:3")
    q = graph_quantities(topo)
    state = ClusterState(
        graph="line:3",
        expected=3,
        eps=1e-3,
        rate=100.0,
        topology=topo,
        quantities=q,
        params=gossip_params("arg", q.mu_gossip, q.r_max),
    )
    state.epoch = 1000.0
    return state


def test_record_marks_first_time_below_eps() -> None:
    state = _state()
    state.record(ErrorPoint(t=1.0, error=0.5, mass_drift_rel=0.0, wall=1001.0))
    assert not state.reached
    state.record(ErrorPoint(t=2.0, error=1e-4, mass_drift_rel=0.0, wall=1002.0))
    state.record(ErrorPoint(t=3.0, error=1e-5, mass_drift_rel=0.0, wall=1003.0))
    assert state.reached
    assert state.t_eps == 2.0
    assert state.wall_eps == 1002.0
    assert state.t == 3.0
    assert state.revision == 3


def test_activations_count_each_exchange_once_and_liveness_expires() -> None:
    state = _state()
    state.nodes[0] = NodeView(node=0, edges={1: 5}, received=1010.0, reports=1)
    state.nodes[1] = NodeView(node=1, edges={0: 5, 2: 3}, received=1010.0, reports=1)
    state.nodes[2] = NodeView(node=2, edges={1: 3}, received=1000.0, reports=1, final=False)
    assert state.activations() == 8
    assert state.edge_activations() == {(0, 1): 5, (1, 2): 3}
    assert state.nodes_alive(now=1011.0) == 2  # node 2 is 11 s old, more than alive_timeout


def test_snapshot_is_json_and_maps_non_finite_to_null() -> None:
    state = _state()
    state.nodes[0] = NodeView(node=0, x=(math.nan,), z=(1.0,), received=1.0, reports=1)
    state.record(ErrorPoint(t=1.0, error=math.inf, mass_drift_rel=0.0, wall=1.0))
    snap = state.snapshot(now=2.0)
    text = json.dumps(snap, allow_nan=False)
    back = json.loads(text)
    assert back["summary"]["error"] is None
    assert back["nodes"][0]["x"] == [None]
    assert back["summary"]["graph"] == "line:3"
    assert back["summary"]["algorithm"] == "arg"
    assert back["topology"]["edges"] == [[0, 1], [1, 2]]
    assert set(back["summary"]) >= {
        "reached",
        "t",
        "error",
        "t_eps",
        "mass_drift_rel",
        "nodes_alive",
        "expected",
        "algorithm",
        "graph",
    }


def test_history_limit_keeps_the_latest_points() -> None:
    state = _state()
    for k in range(10):
        state.record(ErrorPoint(t=float(k), error=1.0, mass_drift_rel=0.0, wall=0.0))
    snap = state.snapshot(now=0.0, history_limit=3)
    assert [p[0] for p in snap["history"]] == [7.0, 8.0, 9.0]


def test_the_estimates_crossing_is_kept_apart_and_a_membership_change_forgets_both() -> None:
    state = _state()
    state.mark_estimate(30.0, 1005.0)
    state.mark_estimate(40.0, 1006.0)  # the first one stays
    assert not state.reached
    assert state.t_eps is None
    state.mark_reached(20.0, 1000.2)
    state.mark_reached(25.0, 1000.25)  # the first one stays
    assert (state.t_eps, state.wall_eps, state.t_eps_estimate) == (20.0, 1000.2, 30.0)
    state.unreach()
    assert not state.reached
    assert state.t_eps is None
    assert state.t_eps_estimate is None
    # Without an exact curve eps can be reached with t_eps unknown.
    state.mark_reached(None, None)
    assert state.reached
    assert state.t_eps is None
