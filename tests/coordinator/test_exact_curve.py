"""The exact error curve assembled from the nodes' traces (coordinator.exact_curve)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coordinator.exact_curve import MAX_OPEN, ExactCurve
from coordinator.metrics import parse_report
from gossip.errors import ProtocolError

INITIAL = np.array([[1.0], [0.0], [0.0]])


def _error(values: list[float]) -> float:
    mean = INITIAL.mean()
    return 0.5 * sum((v - mean) ** 2 for v in values)


def test_a_grid_time_becomes_a_point_once_every_node_sent_it() -> None:
    curve = ExactCurve(INITIAL)
    assert curve.add(0, [(0.0, (1.0,)), (2.0, (0.6,))], wall=1.0) == []
    assert curve.add(1, [(0.0, (0.0,)), (2.0, (0.3,))], wall=2.0) == []
    points = curve.add(2, [(0.0, (0.0,)), (2.0, (0.1,)), (4.0, (0.2,))], wall=3.0)
    assert [p.t for p in points] == [0.0, 2.0]
    assert points[0].error == pytest.approx(_error([1.0, 0.0, 0.0]))
    assert points[1].error == pytest.approx(_error([0.6, 0.3, 0.1]))
    assert points[0].mass_drift_rel == 0.0
    assert points[1].mass_drift_rel == pytest.approx(0.0, abs=1e-15)
    assert points[1].wall == 3.0
    assert curve.points == points


def test_a_grid_time_that_can_no_longer_complete_is_dropped() -> None:
    curve = ExactCurve(INITIAL)
    curve.add(0, [(1.0, (1.0,)), (2.0, (1.0,))], wall=0.0)
    curve.add(1, [(2.0, (0.0,))], wall=0.0)  # its report with 1.0 was lost
    points = curve.add(2, [(1.0, (0.0,)), (2.0, (0.0,))], wall=0.0)
    assert [p.t for p in points] == [2.0]
    assert curve.dropped == 1
    assert curve.add(1, [(1.0, (0.0,))], wall=0.0) == []  # too late: before a complete one


def test_a_node_that_never_reports_holds_at_most_max_open_grid_times() -> None:
    curve = ExactCurve(INITIAL)
    samples = [(float(k), (0.0,)) for k in range(MAX_OPEN + 10)]
    curve.add(0, samples, wall=0.0)
    assert curve.dropped == 10
    assert curve.add(1, samples, wall=0.0) == []


def test_after_a_membership_change_the_curve_takes_nothing() -> None:
    curve = ExactCurve(INITIAL)
    curve.add(0, [(0.0, (1.0,))], wall=0.0)
    curve.stop()
    assert curve.add(1, [(0.0, (0.0,))], wall=0.0) == []
    assert curve.add(2, [(0.0, (0.0,))], wall=0.0) == []
    assert curve.points == []


def test_the_curve_ends_where_the_run_was_asked_to_stop() -> None:
    curve = ExactCurve(INITIAL)
    curve.add(0, [(1.0, (1.0,)), (2.0, (1.0,)), (3.0, (1.0,))], wall=0.0)
    curve.end_at(2.5)
    curve.end_at(9.0)  # a later end changes nothing
    curve.add(1, [(1.0, (0.0,)), (2.0, (0.0,)), (3.0, (0.0,))], wall=0.0)
    points = curve.add(2, [(1.0, (0.0,)), (2.0, (0.0,)), (3.0, (0.0,))], wall=0.0)
    assert [p.t for p in points] == [1.0, 2.0]


def test_unknown_ids_are_ignored() -> None:
    curve = ExactCurve(INITIAL)
    assert curve.add(7, [(0.0, (1.0,))], wall=0.0) == []
    assert curve.add(-1, [(0.0, (1.0,))], wall=0.0) == []


def _report(trace: object) -> bytes:
    return json.dumps(
        {
            "node": 1,
            "t": 1.0,
            "wall": 1.0,
            "x": [0.5],
            "z": [0.5],
            "initial": [0.0],
            "trace": trace,
        }
    ).encode()


def test_the_report_carries_the_trace_and_a_bad_one_is_named() -> None:
    parsed = parse_report("gossip/node/1/state", _report([[0.0, 0.25]]), "gossip", 3, 1)
    assert parsed["trace"] == [(0.0, (0.25,))]
    assert parse_report("gossip/node/1/state", _report(None), "gossip", 3, 1)["trace"] == []
    for bad, needle in (
        ("nope", "'trace' must be a list"),
        ([[0.0]], r"'trace\[0\]'"),  # no value
        ([[0.0, 1.0, 2.0]], r"'trace\[0\]'"),  # dim 1: one value
        ([[0.0, 0.1], [1.0, True]], r"'trace\[1\]'"),
        ([[float("nan"), 0.1]], r"'trace\[0\]'"),
    ):
        with pytest.raises(ProtocolError, match=needle):
            parse_report("gossip/node/1/state", _report(bad), "gossip", 3, 1)
