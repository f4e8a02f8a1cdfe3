"""The exact error curve assembled from the nodes' traces (coordinator.figures.exact_curve)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from continuized.coordinator.figures.exact_curve import MAX_OPEN, ExactCurve
from continuized.coordinator.figures.metrics import parse_report
from continuized.coordinator.figures.opt_measure import exact_measure
from continuized.coordinator.figures.optimization import OptTask, OptTracker
from continuized.gossip.errors import ProtocolError
from continuized.gossip.wire.checks import pack
from continuized.gossip.wire.pubsub import Topics

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
    assert curve.last == points[-1]
    assert curve.completed == 2


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
    assert curve.last is None
    assert curve.completed == 0


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
    parsed = parse_report("gossip/c/node/1/state", _report([[0.0, 0.25]]), Topics("c"), 3, 1)
    assert parsed["trace"] == [(0.0, (0.25,))]
    assert parse_report("gossip/c/node/1/state", _report(None), Topics("c"), 3, 1)["trace"] == []
    for bad, needle in (
        ("nope", "'trace' must be a list"),
        ([[0.0]], r"'trace\[0\]'"),  # no value
        ([[0.0, 1.0, 2.0]], r"'trace\[0\]'"),  # dim 1: one value
        ([[0.0, 0.1], [1.0, True]], r"'trace\[1\]'"),
        ([[float("nan"), 0.1]], r"'trace\[0\]'"),
    ):
        with pytest.raises(ProtocolError, match=needle):
            parse_report("gossip/c/node/1/state", _report(bad), Topics("c"), 3, 1)


def test_a_models_report_comes_packed_and_is_parsed_bit_for_bit_and_checked() -> None:
    # A training node's vectors and trace samples go as base64 (gossip.wire.checks).
    x = np.random.default_rng(3).standard_normal(5)
    body = {
        "node": 1,
        "t": 1.0,
        "wall": 1.0,
        "x": pack(x),
        "z": pack(-x),
        "initial": pack(np.zeros(5)),
        "trace": [[0.5, pack(2 * x)], [1.0, *[0.0] * 5]],  # a row of numbers still parses
    }
    parsed = parse_report("gossip/c/node/1/state", json.dumps(body).encode(), Topics("c"), 3, 5)
    assert parsed["x"] == tuple(x.tolist())
    assert parsed["z"] == tuple((-x).tolist())
    assert parsed["initial"] == (0.0,) * 5
    assert parsed["trace"] == [(0.5, tuple((2 * x).tolist())), (1.0, (0.0,) * 5)]
    for field, bad, needle in (
        ("x", pack(x[:4]), "'x' has 4 components, expected 5"),
        ("z", pack(x[:4]), "'z' has 4 components, expected 5"),
        ("initial", "!!", "'initial' is not valid base64"),
        ("trace", [[0.5, pack(x[:4])]], r"'trace\[0\]' has 4 components"),
        ("trace", [[None, pack(x)]], r"'trace\[0\]' has a bad g None"),
    ):
        wrong = json.dumps({**body, field: bad}).encode()
        with pytest.raises(ProtocolError, match=needle):
            parse_report("gossip/c/node/1/state", wrong, Topics("c"), 3, 5)


class _Quadratics:
    """f_v(x) = 1/2 |x - b_v|^2 with b = (0, 0) and (2, 2): grad f_v^*(y) = y + b_v, x* = (1, 1)."""

    b = np.array([[0.0, 0.0], [2.0, 2.0]])

    def grad_conjugate(self, nodes: np.ndarray, ys: np.ndarray) -> np.ndarray:
        return np.asarray(ys) + self.b[nodes]


def _tracker(problems: object, x_star: np.ndarray | None) -> OptTracker:
    task = OptTask(
        problem="quadratic",
        data="",
        split="",
        dim=2,
        mu=1.0,
        L=1.0,
        eta=0.1,
        c=2.0,
        theta=0.05,
        steps=(0.5,),
        params={},
        x_star=x_star,
        value_star=None,
        problems=problems,
    )
    return OptTracker(task)


def test_an_optimization_runs_curve_is_the_error_of_x_from_the_nodes_exact_duals() -> None:
    measure = exact_measure(_tracker(_Quadratics(), np.array([1.0, 1.0])))
    assert measure is not None
    curve = ExactCurve(np.zeros((2, 2)), measure)  # the duals start at 0
    curve.add(0, [(5.0, (0.5, 0.5))], wall=0.0)
    [point] = curve.add(1, [(5.0, (-0.75, -0.5))], wall=0.0)
    # x = (0.5, 0.5) and (1.25, 1.5): sum_v |x_v - x*|^2 = 0.5 + 0.3125; |sum_v y_v| = 0.25.
    assert point.error == pytest.approx(0.8125)
    assert point.mass_drift_rel == pytest.approx(0.25)
    # Without x* the error is the consensus distance, as the reports' (OptTracker.error).
    measure = exact_measure(_tracker(_Quadratics(), None))
    assert measure is not None
    assert measure(5.0, np.array([[0.5, 0.5], [-0.5, -0.5]]))[0] == pytest.approx(1.0)


def test_without_the_problems_an_optimization_run_has_no_exact_measure() -> None:
    assert exact_measure(_tracker(None, None)) is None
