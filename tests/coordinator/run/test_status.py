"""The retained status keeps the run's membership: a coordinator restarted after a leave, a
join or a death restores the view, the departed, the joined nodes' values and the events."""

from __future__ import annotations

import json

import pytest

from continuized.coordinator.figures.records import NodeView
from continuized.coordinator.run.config import CoordinatorConfig, prepare
from continuized.coordinator.run.roster import Churn
from continuized.coordinator.run.status import (
    membership_record,
    progress_record,
    restore_membership,
    restore_progress,
)
from continuized.gossip.errors import ProtocolError


def _running(dead_after: float | None = None) -> Churn:
    config = CoordinatorConfig(graph="cycle:6", rate=100.0, values="onehot")
    state, plan = prepare(config)
    state.epoch, state.run_id, state.phase = 1000.0, "r", "running"
    state.initial = [(1.0,)] + [(0.0,)] * 5
    state.registered = {f"n{k}": k for k in range(6)}
    return Churn(plan, state, None, dead_after=dead_after)


def test_a_restarted_coordinator_gets_the_members_back_after_a_leave_and_a_death() -> None:
    churn = _running(dead_after=2.0)
    churn.on_request(json.dumps({"cmd": "leave", "name": "n2"}).encode(), now=1010.0)
    for k in (0, 1, 3, 4, 5):
        churn.state.nodes[k] = NodeView(node=k, received=1020.0 if k != 3 else 1010.0)
    churn.tick(1020.5)  # n3 silent for 10.5 s: dead (an end of the path left)
    assert churn.state.departed == {2, 3}
    record = json.loads(json.dumps(membership_record(churn.state)))  # through the broker

    fresh = _running()  # the restarted coordinator: the bootstrap's membership
    restore_membership(fresh.state, record)
    assert fresh.state.departed == {2, 3}
    assert fresh.state.view == churn.state.view
    assert fresh.state.view is not None
    assert fresh.state.view.members == (0, 1, 4, 5)
    assert [e["kind"] for e in fresh.state.churn] == ["leave", "dead"]


def test_a_joined_nodes_value_and_name_come_back() -> None:
    churn = _running()
    churn.state.initial.append((7.0,))  # what Churn.join records for a joiner
    churn.state.registered["late"] = 6
    record = json.loads(json.dumps(membership_record(churn.state)))
    fresh = _running()
    restore_membership(fresh.state, record)
    assert fresh.state.initial[6] == (7.0,)
    assert fresh.state.registered["late"] == 6


def test_an_older_status_without_membership_leaves_the_bootstrap_and_a_bad_one_is_refused() -> None:
    fresh = _running()
    restore_membership(fresh.state, None)
    assert fresh.state.view is None
    assert fresh.state.departed == set()
    with pytest.raises(ProtocolError, match="membership is malformed"):
        restore_membership(fresh.state, {"view": None, "departed": ["x"]})


def test_the_progress_and_the_stop_decision_come_back() -> None:
    churn = _running()
    state = churn.state
    state.mark_estimate(300.0, 1003.0)
    state.mark_reached(320.0, 1003.2)
    record = json.loads(json.dumps(progress_record(state, "reached")))
    fresh = _running().state
    assert restore_progress(fresh, record) == "reached"
    assert (fresh.reached, fresh.t_eps, fresh.wall_eps) == (True, 320.0, 1003.2)
    assert (fresh.t_eps_estimate, fresh.wall_eps_estimate) == (300.0, 1003.0)
    untouched = _running().state
    assert restore_progress(untouched, progress_record(untouched)) == ""  # not decided yet
    assert not untouched.reached
    assert restore_progress(untouched, None) == ""  # an older coordinator's status
