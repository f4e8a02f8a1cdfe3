"""The coordinator's side of live optimization: Bootstraps, and the figures from the reports."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.coordinator.figures.optimization import OptTask, OptTracker, prepare_task
from continuized.coordinator.membership.plan import Assignment, Plan, build_bootstraps
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import Algorithm, GossipParams
from continuized.gossip.model.mixing import mix
from continuized.gossip.wire.schema import Bootstrap, decode, encode


class _Sum:
    """F(x) = sum_v 1/2 |x - b_v|^2 for two nodes with b = (0, 0) and (2, 2): x* = (1, 1)."""

    def value(self, x: np.ndarray) -> float:
        b = np.array([[0.0, 0.0], [2.0, 2.0]])
        return float(0.5 * np.sum((np.asarray(x)[None, :] - b) ** 2))


def _task(x_star: np.ndarray | None = np.array([1.0, 1.0]), eta: float = 0.1) -> OptTask:
    return OptTask(
        problem="quadratic",
        data="",
        split="",
        dim=2,
        mu=1.0,
        L=1.0,
        eta=eta,
        c=2.0,
        theta=0.05,
        steps=(0.25, 0.75),
        params={"eta": eta},
        x_star=x_star,
        value_star=None if x_star is None else _Sum().value(x_star),
        problems=_Sum(),
        reason="" if x_star is not None else "the coordinator cannot read csv:/data",
    )


def test_bootstraps_carry_the_specs_and_each_edges_step_never_data() -> None:
    topo = parse_topology("line:3")
    plan = Plan(
        topology=topo,
        params=GossipParams(Algorithm.ARG, eta=0.1, c=2.0, theta=0.05),
        cluster="c",
        rate=100.0,
        broker="",
        metrics_period=0.1,
        values=np.zeros((3, 2)),
        dim=2,
        task=_task(),
    )
    assignment = Assignment(
        "r", 10.0, ("a", "b", "c"), tuple(f"tcp://h:{p}" for p in (1, 2, 3)), ((0.0, 0.0),) * 3
    )
    boots = build_bootstraps(plan, assignment)
    middle = boots[1]
    assert (middle.problem, middle.algorithm, middle.n, middle.dim) == ("quadratic", "acd", 3, 2)
    assert {nb.edge_index: nb.step for nb in middle.neighbors} == {0: 0.25, 1: 0.75}
    assert decode(encode(middle)) == middle
    gossip = build_bootstraps(
        Plan(
            topology=topo,
            params=plan.params,
            cluster="c",
            rate=1.0,
            broker="",
            metrics_period=0.1,
            values=np.zeros((3, 1)),
        ),
        Assignment("r", 10.0, ("a", "b", "c"), assignment.addresses, ((0.0,),) * 3),
    )
    assert gossip[1].problem == ""
    assert {nb.step for nb in gossip[1].neighbors} == {0.5}


def test_a_bootstrap_with_a_bad_step_is_refused_naming_the_field() -> None:
    import msgpack
    import pytest

    from continuized.gossip.errors import ProtocolError

    boot = Bootstrap(0, "c", "acd", 0.1, 2.0, 0.05, 1.0, 10.0, (), (0.0,), "", 0.1, 1)
    body = msgpack.unpackb(encode(boot))
    body["neighbors"] = [[1, "tcp://h:1", 0, 0.5, -1.0]]
    with pytest.raises(ProtocolError, match=r"neighbors\[0\]\.step"):
        decode(msgpack.packb(body))


def test_distance_gap_consensus_from_the_reports() -> None:
    tracker = OptTracker(_task())
    x = np.array([[0.0, 0.0], [2.0, 2.0]])
    zero = np.zeros((2, 2))
    point = tracker.measure(np.array([5.0, 5.0]), x, zero, zero, at=5.0, wall=1.0)
    assert point.distance == 4.0  # |(-1,-1)|^2 + |(1,1)|^2
    assert point.consensus == 4.0
    assert point.gap == 0.0  # the average is x*
    assert point.dual_drift == 0.0
    assert tracker.error(point) == 4.0


def test_without_x_star_the_error_is_the_consensus_and_the_reason_is_kept() -> None:
    tracker = OptTracker(_task(x_star=None))
    x = np.array([[0.0, 1.0], [2.0, 1.0]])
    point = tracker.measure(np.zeros(2), x, np.zeros((2, 2)), np.zeros((2, 2)), 0.0, 0.0)
    assert math.isnan(point.distance)
    assert math.isnan(point.gap)
    assert tracker.error(point) == point.consensus == 2.0
    assert tracker.summary()["no_check_reason"].startswith("the coordinator cannot read")


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-5, 5), min_size=4, max_size=4),
    st.lists(st.floats(0, 50), min_size=2, max_size=2),
    st.floats(0.001, 0.2),
)
def test_zero_dual_sums_mixed_from_different_report_times_stay_zero(
    flow: list[float], times: list[float], eta: float
) -> None:
    # Two nodes after one jump: opposite flows, each report mixed to its own time. Mixed
    # back to one common time, the sums are 0 again (to rounding), whatever the times.
    tracker = OptTracker(_task(eta=eta))
    dy, dz = np.array([flow[0:2]]), np.array([flow[2:4]])
    t = np.array(times)
    y0, z0 = np.vstack([dy, -dy]), np.vstack([dz, -dz])
    y, z = mix(y0, z0, eta, t[:, None])  # node v's state at its report time t_v
    at = float(t.max())
    point = tracker.measure(t, np.zeros((2, 2)), y, z, at=at, wall=0.0)
    scale = 1.0 + float(np.abs(flow).max()) * math.exp(2 * eta * 50)
    assert point.dual_drift <= 1e-12 * scale
    # Unmixed (each at its own time) they would not cancel: the check can fail.
    if abs(times[0] - times[1]) > 1 and abs(flow[0] - flow[2]) > 0.1:
        assert float(np.linalg.norm(y.sum(axis=0))) > 1e-9


def test_the_dashboard_gets_the_optimization_figures_and_the_rate_line() -> None:
    from dataclasses import replace

    from continuized.coordinator.dashboard.runs import RunArchive
    from continuized.coordinator.figures.optimization import OptPoint
    from continuized.coordinator.figures.records import ErrorPoint
    from continuized.coordinator.figures.state import ClusterState

    topo = parse_topology("line:2")
    tracker = OptTracker(replace(_task(), bound_c=3.0))
    state = ClusterState(
        graph="line:2",
        expected=2,
        topology=topo,
        params=GossipParams(Algorithm.ARG, eta=0.1, c=2.0, theta=0.05),
        optimization=tracker,
        run_id="r1",
        initial=[(0.0, 0.0), (0.0, 0.0)],
    )
    tracker.history.append(OptPoint(1.0, 4.0, 0.5, 4.0, 0.0, 10.0))
    state.record(ErrorPoint(1.0, 4.0, 0.0, 10.0))
    snap = state.snapshot()
    assert snap["summary"]["algorithm"] == "acd"
    assert snap["optimization"]["history"] == [[1.0, 4.0, 0.5, 4.0, 0.0, 10.0]]
    assert snap["optimization"]["x_star"] == [1.0, 1.0]
    archive = RunArchive()
    archive.follow(state)
    record = archive.live
    assert record is not None
    # The rate line is C exp(-theta t) on sum_v |x_v - x*|^2 (the zero initial values of the
    # dual pair would give a gossip error of 0 and no line).
    assert (record.algorithm, record.e0, record.bound_factor, record.theta) == (
        "acd",
        3.0,
        1.0,
        0.05,
    )


def test_a_task_without_a_split_gets_the_default_the_nodes_can_read() -> None:
    # The nodes read the split from their Bootstrap: an empty one would stop each of them
    # with "unknown split ''" while the coordinator's own network used iid:0.
    topology = parse_topology("line:4")
    task = prepare_task("ridge:0.1", "breast-cancer", "", topology, graph_quantities(topology))
    assert task.split == "iid:0"
    given = prepare_task(
        "ridge:0.1", "breast-cancer", "iid:3", topology, graph_quantities(topology)
    )
    assert given.split == "iid:3"
