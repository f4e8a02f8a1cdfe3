"""When the coordinator declares eps: the rule on synthetic report streams of an exact process.

The process is the exact continuized ARG (the core's jump and mixing), run centrally; every
node reports its state at its own times and the reports reach the coordinator's
:class:`~coordinator.run.evaluation.ReportBook` late, out of step, or not at all. The coordinator
evaluates every report period, as the service does, and :class:`~coordinator.run.evaluation.EpsRule`
decides. The true error is known at every t, so the tests check both that eps is detected
soon after it holds and that it is never declared while the true error is above eps.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.coordinator.figures.records import ErrorPoint
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.membership.plan import Plan
from continuized.coordinator.run.evaluation import (
    DIVERGED,
    EpsRule,
    Evaluation,
    ReportBook,
    diverged,
)
from continuized.gossip.errors import ConfigError
from continuized.gossip.exchange.membership import make_view
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.jumps import jump
from continuized.gossip.model.mixing import mix
from continuized.gossip.wire.pubsub import Topics

EPS = 1e-6
RATE = 100.0  # activations per second: one report period is RATE * PERIOD = 10 units of t
PERIOD = 0.1
TOPICS = Topics("test")


@dataclass
class Outcome:
    """What the coordinator decided, against the truth."""

    detected_at: float | None  # the coordinator's t when the rule fired
    t_eps: float | None  # the t the rule names
    true_eps: float  # the first evaluation tick where the true error is <= EPS
    true_error_at_detection: float


def _run(
    spec: str,
    delay: Callable[[int, float, np.random.Generator], float | None],
    t_end: float,
    seed: int = 0,
) -> Outcome:
    """Run the exact process to ``t_end`` with reports delivered per ``delay``.

    ``delay(node, t, rng)`` is the delivery delay (in units of t) of the report node takes at
    ``t``, or ``None`` for a report that is lost.
    """
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    params = gossip_params("arg", q.mu_gossip, q.r_max)
    plan = Plan(topo, params, "test", RATE, "", PERIOD)
    n = topo.n
    initial = np.zeros(n)
    initial[0] = 1.0
    state = ClusterState(graph=spec, expected=n, eps=EPS, rate=RATE)
    state.initial = [(float(v),) for v in initial]
    book = ReportBook(plan, state, TOPICS)
    rule = EpsRule(EPS)
    rng = np.random.default_rng(seed)
    x, z = initial.copy(), initial.copy()
    counts = np.zeros((n, n), dtype=np.int64)
    neighbours = [
        [int(b) for a, b in topo.edges if a == v] + [int(a) for a, b in topo.edges if b == v]
        for v in range(n)
    ]
    step = RATE * PERIOD
    # Observation times: node v reports at its own phase every period; the coordinator
    # evaluates every period. Deliveries are queued by arrival time.
    phases = rng.uniform(0.0, step, size=n)
    events: list[tuple[float, int, int]] = []  # (t, kind 0=report 1=evaluate, node)
    k = 0
    while k * step <= t_end:
        for v in range(n):
            events.append((k * step + phases[v], 0, v))
        events.append(((k + 1) * step, 1, -1))
        k += 1
    events.sort()
    inbox: list[tuple[float, int, bytes]] = []
    t = 0.0
    true_eps = math.inf
    outcome_t: float | None = None
    outcome_first: ErrorPoint | None = None
    true_at_detection = math.nan
    seq = 0
    for when, kind, node in events:
        # Advance the exact process to ``when``.
        while True:
            dt = rng.exponential(1.0)
            if t + dt > when:
                x, z = mix(x, z, params.eta, when - t)
                t = when
                break
            x, z = mix(x, z, params.eta, dt)
            t += dt
            u, v = (int(e) for e in topo.edges[rng.integers(len(topo.edges))])  # uniform P
            x[u], z[u], x[v], z[v] = jump(x[u], z[u], x[v], z[v], params.c)
            counts[u, v] += 1
            counts[v, u] += 1
        true_error = 0.5 * float(np.sum((x - initial.mean()) ** 2))
        if kind == 0:
            d = delay(node, t, rng)
            if d is not None:
                payload = _report(
                    node, t, x[node], z[node], initial[node], counts, neighbours[node]
                )
                heapq.heappush(inbox, (t + d, seq, payload))
                seq += 1
            continue
        while inbox and inbox[0][0] <= t:
            _, _, payload = heapq.heappop(inbox)
            book.ingest(TOPICS.state(json.loads(payload)["node"]), payload)
        if true_error <= EPS and math.isinf(true_eps):
            true_eps = t
        if book.take_fresh():
            ev = book.evaluate()
            if ev is not None and outcome_t is None:
                first = rule.observe(ev)
                if first is not None:
                    outcome_t, outcome_first = t, first
                    true_at_detection = true_error
                    break  # the service stops the nodes here
    return Outcome(
        outcome_t,
        None if outcome_first is None else outcome_first.t,
        true_eps,
        true_at_detection,
    )


def _report(
    node: int, t: float, x: float, z: float, init: float, counts: np.ndarray, peers: list[int]
) -> bytes:
    return json.dumps(
        {
            "node": node,
            "name": f"n{node}",
            "address": "tcp://127.0.0.1:1",
            "t": t,
            "wall": 0.0,
            "x": [float(x)],
            "z": [float(z)],
            "initial": [float(init)],
            "final": False,
            "edges": {str(p): int(counts[node, p]) for p in peers},
        }
    ).encode()


T_END = 1500.0  # ARG on grid:3x3 reaches eps near t = 120, line:6 near t = 300


def test_staggered_and_jittered_reports_detect_eps_within_a_few_periods() -> None:
    step = RATE * PERIOD
    out = _run("grid:3x3", lambda v, t, rng: float(rng.uniform(0.0, 2.0 * step)), T_END)
    assert math.isfinite(out.true_eps), "the process must reach eps within T_END"
    assert out.detected_at is not None
    assert out.true_error_at_detection <= EPS
    # Every report is at most 3 periods old: confirm + one round of reports is enough.
    assert out.detected_at - out.true_eps <= 12 * step


def test_a_block_of_nodes_reporting_far_behind_delays_but_does_not_block_eps() -> None:
    # Nodes 0-3 reach the coordinator 40 periods late (a host process that publishes its
    # nodes one after another under load): the spread of the latest reports is then far
    # over three periods, and yet eps must be detected, one round of late reports after.
    step = RATE * PERIOD
    late = 40 * step

    def delay(v: int, t: float, rng: np.random.Generator) -> float:
        return late + float(rng.uniform(0.0, step)) if v < 4 else float(rng.uniform(0.0, step))

    out = _run("grid:3x3", delay, T_END)
    assert out.detected_at is not None
    assert out.true_error_at_detection <= EPS
    assert out.t_eps is not None
    assert out.detected_at - out.true_eps <= late + 12 * step


def test_a_silent_node_blocks_eps_until_it_reports_again() -> None:
    step = RATE * PERIOD
    silent = (50.0, 1000.0)  # node 4 (the grid's centre) sends nothing in this window

    def delay(v: int, t: float, rng: np.random.Generator) -> float | None:
        if v == 4 and silent[0] <= t < silent[1]:
            return None
        return float(rng.uniform(0.0, step))

    out = _run("grid:3x3", delay, T_END)
    assert out.true_eps < silent[1], "the test needs eps to hold while the node is silent"
    assert out.detected_at is not None
    assert out.detected_at >= silent[1]
    assert out.true_error_at_detection <= EPS
    assert out.t_eps is not None
    assert out.t_eps >= silent[1] - 2 * step


def test_lost_reports_never_make_eps_declared_early() -> None:
    step = RATE * PERIOD

    def delay(v: int, t: float, rng: np.random.Generator) -> float | None:
        return None if rng.random() < 0.5 else float(rng.uniform(0.0, 3.0 * step))

    for seed in range(3):
        out = _run("line:6", delay, T_END, seed=seed)
        assert out.detected_at is not None
        assert out.true_error_at_detection <= EPS
        assert out.detected_at >= out.true_eps


def _ev(error: float, t: float, times: list[float], stopped: bool = False) -> Evaluation:
    return Evaluation(ErrorPoint(t, error, 0.0, t), np.array(times), True, stopped)


def test_rule_needs_points_in_a_row_and_a_newer_report_of_every_node() -> None:
    rule = EpsRule(EPS, confirm=3)
    assert rule.observe(_ev(1e-7, 100.0, [90.0, 100.0, 110.0])) is None
    assert rule.observe(_ev(1e-7, 110.0, [95.0, 105.0, 115.0])) is None
    # Enough points, but node 1 has not reported again since the first point.
    assert rule.observe(_ev(1e-7, 120.0, [99.0, 100.0, 120.0])) is None
    first = rule.observe(_ev(1e-7, 130.0, [99.0, 101.0, 120.0]))
    assert first is not None
    assert first.t == 100.0
    # A point above eps, a stopped node or a NaN starts the count again.
    breakers = (
        _ev(2e-6, 140.0, [135.0, 135.0]),
        _ev(1e-7, 140.0, [135.0, 135.0], stopped=True),
        _ev(math.nan, 140.0, [135.0, 135.0]),
    )
    for breaker in breakers:
        rule = EpsRule(EPS, confirm=2)
        assert rule.observe(_ev(1e-7, 100.0, [99.0, 99.0])) is None
        assert rule.observe(breaker) is None
        assert rule.observe(_ev(1e-7, 150.0, [149.0, 149.0])) is None
        again = rule.observe(_ev(1e-7, 160.0, [155.0, 155.0]))
        assert again is not None
        assert again.t == 150.0


def test_points_before_the_latest_views_start_neither_count_nor_confirm() -> None:
    # A leave accepted at t=100 starts its view at T=160: the points until then measure the
    # members being left, however small their error.
    rule = EpsRule(EPS, confirm=2)
    for t in (110.0, 130.0, 150.0):
        assert rule.observe(_ev(1e-7, t, [t - 1, t - 1]), not_before=160.0) is None
    assert rule.observe(_ev(1e-7, 160.0, [159.0, 159.0]), not_before=160.0) is None
    first = rule.observe(_ev(1e-7, 170.0, [169.0, 169.0]), not_before=160.0)
    assert first is not None
    assert first.t == 160.0
    # A point before the start also breaks a run that had begun under an earlier view.
    rule = EpsRule(EPS, confirm=2)
    assert rule.observe(_ev(1e-7, 100.0, [99.0, 99.0])) is None
    assert rule.observe(_ev(1e-7, 110.0, [109.0, 109.0]), not_before=200.0) is None
    assert rule.observe(_ev(1e-7, 210.0, [209.0, 209.0]), not_before=200.0) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(1e-9, 1e-5),
            st.lists(st.integers(0, 3), min_size=3, max_size=3),
            st.booleans(),
        ),
        min_size=1,
        max_size=30,
    ),
    st.integers(1, 4),
)
def test_rule_fires_exactly_on_its_definition(
    steps: list[tuple[float, list[int], bool]], confirm: int
) -> None:
    rule = EpsRule(EPS, confirm=confirm)
    seen: list[Evaluation] = []
    times = np.zeros(3)
    for i, (error, advance, stopped) in enumerate(steps):
        times = times + np.array(advance, dtype=np.float64)  # each node's report moves on, or not
        ev = Evaluation(ErrorPoint(10.0 * i, error, 0.0, 0.0), times, True, stopped)
        seen.append(ev)
        got = rule.observe(ev)
        run: list[Evaluation] = []
        for e in reversed(seen):
            if e.stopped or e.point.error > EPS:
                break
            run.append(e)
        run.reverse()
        fires = len(run) >= confirm and bool(np.all(ev.times > run[0].times))
        assert (got is not None) == fires
        if got is not None:
            assert got == run[0].point
            # The caller stops asking once eps is reached: start a fresh rule and history.
            seen.clear()
            rule = EpsRule(EPS, confirm=confirm)


@pytest.mark.parametrize(("eps", "confirm"), [(0.0, 3), (math.nan, 3), (1e-6, 0)])
def test_rule_rejects_bad_settings(eps: float, confirm: int) -> None:
    with pytest.raises(ConfigError, match="must be"):
        EpsRule(eps, confirm)


@given(
    first=st.floats(0.0, 1.0),
    eps=st.floats(1e-300, 1e-3),
    grown=st.floats(0.0, 1.0),
)
def test_an_error_within_a_thousand_times_eps_or_its_first_value_is_not_divergence(
    first: float, eps: float, grown: float
) -> None:
    # A coordinator resuming a converged run may see exactly 0 first, then rounding.
    assert not diverged(first, grown * DIVERGED * max(first, eps), eps)


@pytest.mark.parametrize(
    ("first", "last", "eps", "floor", "expected"),
    [
        (0.5, 501.0, 1e-6, 0.0, True),  # a thousand times the first error, and more
        (0.5, math.nan, 1e-6, 0.0, True),
        (0.5, math.inf, 1e-6, 0.0, True),
        (0.0, 3.08e-33, 1e-6, 0.0, False),  # resumed at exactly 0, then one rounding
        (0.0, 3.08e-33, 1e-300, 2.5e-32, False),  # an eps below float's floor
        (0.0, 1.1e-3, 1e-6, 0.0, True),  # from 0 to far above eps: it did diverge
    ],
)
def test_divergence_is_growth_over_a_thousand_times_the_first_error_eps_or_the_float_floor(
    first: float, last: float, eps: float, floor: float, expected: bool
) -> None:
    assert diverged(first, last, eps, floor) is expected


def test_after_churn_the_point_comes_from_a_consistent_cut_of_the_members() -> None:
    # line:3; node 1 left (view 1 joins 0 and 2 directly), and node 3 joined at 2.
    topo = parse_topology("line:3")
    q = graph_quantities(topo)
    plan = Plan(topo, gossip_params("arg", q.mu_gossip, q.r_max), "test", RATE, "", PERIOD)
    state = ClusterState(graph="line:3", expected=3, eps=EPS, rate=RATE)
    state.initial = [(1.0,), (0.0,), (0.0,), (2.0,)]
    state.departed = {1}
    state.view = make_view(1, 50.0, [0, 2, 3], [(0, 2), (2, 3)], previous=None)
    book = ReportBook(plan, state, TOPICS)
    counts = np.zeros((4, 4), dtype=np.int64)

    def send(node: int, t: float, x: float) -> None:
        peers = [p for p in (0, 2, 3) if p != node]
        payload = _report(node, t, x, x, state.initial[node][0], counts, peers)
        book.ingest(TOPICS.state(node), payload)

    # Every member equal to the mean, 1: no error, no drift.
    for node in (0, 2, 3):
        send(node, 60.0, 1.0)
    # Then node 3 applies an exchange with node 2 (a flow of 0.5 its way) and reports; node 2
    # reports later, but before it applied its half: its latest report lacks the flow.
    counts[3, 2] = 1
    send(3, 61.0, 1.5)
    send(2, 62.0, 1.0)
    send(0, 62.0, 1.0)
    ev = book.evaluate()
    assert ev is not None
    # The latest reports would count the flow at node 3 only: error and drift out of nothing.
    # The cut goes back to node 3's report before the exchange.
    assert ev.point.error == pytest.approx(0.0, abs=1e-12)
    assert ev.point.mass_drift_rel == pytest.approx(0.0, abs=1e-12)
    # A cut that would reach back before the view's start mixes two memberships: not used.
    state.view = make_view(1, 60.5, [0, 2, 3], [(0, 2), (2, 3)], previous=None)
    ev = book.evaluate()
    assert ev is not None
    assert ev.point.mass_drift_rel > 0.1


def _two_nodes() -> tuple[ClusterState, ReportBook, np.ndarray]:
    """line:2 from initial values 1 and 0: its state, its report book, its edge counts."""
    topo = parse_topology("line:2")
    q = graph_quantities(topo)
    plan = Plan(topo, gossip_params("arg", q.mu_gossip, q.r_max), "test", RATE, "", PERIOD)
    state = ClusterState(graph="line:2", expected=2, eps=EPS, rate=RATE)
    state.initial = [(1.0,), (0.0,)]
    return state, ReportBook(plan, state, TOPICS), np.zeros((2, 2), dtype=np.int64)


def test_a_stopping_runs_periodic_reports_count_as_life_and_its_finals_are_taken() -> None:
    state, book, counts = _two_nodes()
    topic = TOPICS.state(0)
    periodic = _report(0, 10.0, 0.5, 0.5, 1.0, counts, [1])
    assert not book.alive(topic, periodic)  # a node never heard from: parsed in full
    book.ingest(topic, periodic)
    assert book.alive(topic, _report(0, 11.0, 0.4, 0.5, 1.0, counts, [1]))
    assert (state.nodes[0].reports, state.nodes[0].t) == (2, 10.0)  # counted, not parsed
    # One that carries trace samples is taken whole: the node sends each grid time once.
    traced = json.dumps({**json.loads(periodic), "t": 11.5, "trace": [[11.0, 0.45]]}).encode()
    assert not book.alive(topic, traced)
    assert book.alive(topic, json.dumps({**json.loads(traced), "trace": []}).encode())
    final = json.dumps({**json.loads(periodic), "t": 12.0, "final": True}).encode()
    assert not book.alive(topic, final)
    book.ingest(topic, final)
    assert state.nodes[0].final
    assert state.nodes[0].t == 12.0


def test_a_periodic_report_that_comes_after_the_final_still_brings_its_samples() -> None:
    # The final comes over the lifeline, the node's last periodic report over a broker that
    # fell behind: that report's grid times are in no other message.
    state, book, counts = _two_nodes()

    def traced(node: int, t: float, x: float, samples: list[list[float]], final: bool) -> bytes:
        report = json.loads(_report(node, t, x, x, state.initial[node][0], counts, [1 - node]))
        return json.dumps({**report, "trace": samples, "final": final}).encode()

    book.ingest(TOPICS.state(0), traced(0, 12.0, 0.5, [[10.0, 0.5]], True))
    late = traced(0, 6.0, 0.5, [[5.0, 0.5]], False)  # sent before the final, came after it
    book.ingest(TOPICS.state(0), late)
    assert state.nodes[0].t == 12.0  # the final's state stays
    book.ingest(TOPICS.state(1), traced(1, 12.0, 0.5, [[5.0, 0.5], [10.0, 0.5]], True))
    assert [p.t for p in state.exact] == [5.0, 10.0]
    assert book.bad == 0


def test_a_stopped_runs_status_names_its_own_target_and_why_it_diverged() -> None:
    from continuized.coordinator.figures.records import RunSummary
    from continuized.coordinator.figures.train_measure import TrainPoint, TrainTracker
    from continuized.coordinator.run.evaluation import divergence_text, outcome_text
    from continuized.gossip.train.recipe import Recipe

    def stopped(reason: str, reached: bool) -> RunSummary:
        return RunSummary("r", reached, None, None, 0, None, 20.0, 3e-7, None, None, None, reason)

    state = ClusterState(graph="cycle:3", expected=3, eps=1e-6, rate=20.0)
    state.history.append(ErrorPoint(10.0, 5e3, 0.0, 0.0))
    assert outcome_text(state, stopped("reached", True), 1e-6) == (
        "reached 1e-06; final error 3.000e-07"
    )
    grew = outcome_text(state, stopped("diverged", False), 1e-6)
    assert grew == f"diverged: {divergence_text(state)}"
    assert "the error grew to 5.000e+03" in grew
    assert "lower --rate" in grew
    recipe = Recipe("softmax", "iris", "iid:0")
    state.training = TrainTracker(recipe, recipe.problem("cycle:3"), target=0.9)
    state.training.points.append(TrainPoint(40.0, 0.3, 0.93, 0.9, 0.0, 0.0))
    assert (
        outcome_text(state, stopped("reached", True), 1e-6)
        == "reached accuracy 0.9; accuracy 0.93 at t = 40"
    )
    assert "lower --lr" in outcome_text(state, stopped("diverged", False), 1e-6)
