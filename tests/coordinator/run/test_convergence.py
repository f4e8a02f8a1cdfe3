"""When the coordinator declares eps, and the t_eps it names (coordinator.run.convergence).

The replay is the exact continuized ARG (the core's jump and mixing) run centrally: every node
reports its state at its own times with its trace (its exact values at the grid times since its
last report, as :mod:`gossip.exchange.trace` makes a live node send them), and the reports reach the
coordinator's :class:`~coordinator.run.evaluation.ReportBook` late and out of step. The coordinator
evaluates every report period, as the service does, and feeds
:class:`~coordinator.run.convergence.Convergence` the exact curve's new points and the estimate. The
true error at every grid time is known, so the tests check that ``t_eps`` is the true first
crossing on the grid, and that the stop comes once the curve has confirmed it.
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass

import numpy as np
import pytest

from continuized.coordinator.figures.records import ErrorPoint
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.membership.plan import Plan
from continuized.coordinator.run.convergence import Convergence, ExactRule
from continuized.coordinator.run.evaluation import Evaluation, ReportBook
from continuized.gossip.errors import ConfigError
from continuized.gossip.exchange.trace import trace_step
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.jumps import jump
from continuized.gossip.model.mixing import mix
from continuized.gossip.wire.pubsub import Topics

EPS = 1e-6
PERIOD = 0.1
TOPICS = Topics("test")


def _p(t: float, error: float) -> ErrorPoint:
    return ErrorPoint(float(t), error, 0.0, 0.0)


def test_the_exact_rule_confirms_on_points_in_a_row_and_names_the_first_crossing() -> None:
    rule = ExactRule(EPS, confirm=3)
    errors = [1e-5, 5e-7, 2e-6, 8e-7, 9e-7, 1e-6]  # dips at t=1, back up, then 3 in a row
    out = [rule.observe(_p(t, e)) for t, e in enumerate(errors)]
    assert out[:5] == [None] * 5
    # Confirmed at t=5; t_eps is the curve's first crossing (t=1), as a run's first grid time
    # below eps in the simulator.
    assert out[5] is not None
    assert out[5].t == 1.0
    assert rule.observe(_p(6, 1e-7)) is out[5]


def test_a_nan_point_breaks_the_row() -> None:
    rule = ExactRule(EPS, confirm=2)
    assert rule.observe(_p(0, 1e-7)) is None
    assert rule.observe(_p(1, math.nan)) is None
    assert rule.observe(_p(2, 1e-7)) is None
    hit = rule.observe(_p(3, 1e-7))
    assert hit is not None
    assert hit.t == 0.0


@pytest.mark.parametrize(("eps", "confirm"), [(0.0, 3), (math.inf, 3), (1e-6, 0)])
def test_bad_settings_are_named(eps: float, confirm: int) -> None:
    with pytest.raises(ConfigError, match="must be"):
        ExactRule(eps, confirm)
    with pytest.raises(ConfigError, match="rate"):
        Convergence(1e-6, 0.0)


def _ev(error: float, t: float, times: list[float]) -> Evaluation:
    return Evaluation(_p(t, error), np.array(times), True, False)


def test_with_an_exact_curve_only_the_curve_decides() -> None:
    conv = Convergence(EPS, rate=100.0, confirm=2)
    for k in range(3):  # the estimates confirm eps ...
        conv.add_estimate(_ev(1e-7, 10.0 * k, [10.0 * k, 10.0 * k]))
    assert conv.estimate is not None
    assert conv.estimate.t == 0.0
    assert conv.reached(exact=False)
    assert not conv.reached(exact=True)  # ... but the curve has not
    conv.add_exact([_p(40, 2e-6), _p(45, 5e-7), _p(50, 4e-7)])
    assert conv.reached(exact=True)
    assert conv.t_eps(exact=True) == 45.0
    assert conv.wall_s(exact=True) == pytest.approx(0.45)  # t_eps / rate
    # Without an exact curve t_eps is unknown, never the estimate's.
    assert conv.t_eps(exact=False) is None
    assert conv.wall_s(exact=False) is None
    conv.restart()
    assert not conv.reached(exact=True)
    assert not conv.reached(exact=False)
    assert conv.estimate is None
    assert conv.crossing is None


@dataclass
class Replay:
    """What the coordinator decided on a replay, against the truth on the grid."""

    decided_at: float | None  # the replay's t when Convergence said reached
    conv: Convergence
    grid: list[float]
    true_errors: list[float]  # the true error at each grid time
    curve: list[ErrorPoint]
    step: float


def _replay(spec: str, rate: float, t_end: float, seed: int = 0, jitter: float = 2.0) -> Replay:
    """Run exact ARG on ``spec`` at ``rate`` (activations/s) to ``t_end`` or the decision."""
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    params = gossip_params("arg", q.mu_gossip, q.r_max)
    plan = Plan(topo, params, "test", rate, "", PERIOD)
    n = topo.n
    initial = np.zeros(n)
    initial[0] = 1.0
    state = ClusterState(graph=spec, expected=n, eps=EPS, rate=rate)
    state.initial = [(float(v),) for v in initial]
    book = ReportBook(plan, state, TOPICS)
    conv = Convergence(EPS, rate)
    rng = np.random.default_rng(seed)
    step = trace_step(rate, PERIOD, n)  # the live nodes' grid
    report = rate * PERIOD
    x, z = initial.copy(), initial.copy()
    counts = np.zeros((n, n), dtype=np.int64)
    peers = [
        [int(b) for a, b in topo.edges if a == v] + [int(a) for a, b in topo.edges if b == v]
        for v in range(n)
    ]
    grid: list[float] = []
    true_errors: list[float] = []
    samples: list[list[list[float]]] = [[] for _ in range(n)]  # per node, not yet reported
    # Events in t: grid times (-1), node reports (their own phase), evaluations (every period).
    phases = rng.uniform(0.0, report, size=n)
    events: list[tuple[float, int]] = []
    k = 0
    while k * step <= t_end:
        events.append((k * step, -1))
        k += 1
    k = 0
    while k * report <= t_end:
        events += [(k * report + phases[v], v) for v in range(n)]
        events.append(((k + 1) * report, n))
        k += 1
    events.sort()
    inbox: list[tuple[float, int, bytes]] = []
    seq, t, seen = 0, 0.0, 0
    for when, who in events:
        while True:  # the exact process up to ``when``
            dt = rng.exponential(1.0)
            if t + dt > when:
                x, z = mix(x, z, params.eta, when - t)
                t = when
                break
            x, z = mix(x, z, params.eta, dt)
            t += dt
            u, v = (int(e) for e in topo.edges[rng.integers(len(topo.edges))])
            x[u], z[u], x[v], z[v] = jump(x[u], z[u], x[v], z[v], params.c)
            counts[u, v] += 1
            counts[v, u] += 1
        if who == -1:  # a grid time: every node's value there is final
            grid.append(t)
            true_errors.append(0.5 * float(np.sum((x - initial.mean()) ** 2)))
            for v in range(n):
                samples[v].append([t, float(x[v])])
        elif who < n:
            payload = json.dumps(
                {
                    "node": who,
                    "t": t,
                    "wall": 0.0,
                    "x": [float(x[who])],
                    "z": [float(z[who])],
                    "initial": [float(initial[who])],
                    "edges": {str(p): int(counts[who, p]) for p in peers[who]},
                    "trace": samples[who],
                }
            ).encode()
            samples[who] = []
            delay = float(rng.uniform(0.0, jitter * report))
            heapq.heappush(inbox, (t + delay, seq, payload))
            seq += 1
        else:  # the coordinator's metrics period
            while inbox and inbox[0][0] <= t:
                _, _, payload = heapq.heappop(inbox)
                book.ingest(TOPICS.state(json.loads(payload)["node"]), payload)
            conv.add_exact(state.exact[seen:])
            seen = len(state.exact)
            if book.take_fresh():
                ev = book.evaluate()
                if ev is not None:
                    conv.add_estimate(ev)
            if conv.reached(book.exact_live):
                return Replay(t, conv, grid, true_errors, list(state.exact), step)
    return Replay(None, conv, grid, true_errors, list(state.exact), step)


def _true_crossings(r: Replay, confirm: int = 3) -> tuple[float, float]:
    """The first grid time at or below eps, and the grid time that confirms a row of them."""
    first = next(g for g, e in zip(r.grid, r.true_errors, strict=True) if e <= EPS)
    row = 0
    for g, e in zip(r.grid, r.true_errors, strict=True):
        row = row + 1 if e <= EPS else 0
        if row == confirm:
            return first, g
    raise AssertionError("the replay never confirmed eps")


@pytest.mark.parametrize(("spec", "rate", "seed"), [("grid:3x3", 100.0, 0), ("line:8", 100.0, 1)])
def test_t_eps_is_the_true_first_crossing_on_the_grid(spec: str, rate: float, seed: int) -> None:
    r = _replay(spec, rate, t_end=4000.0, seed=seed)
    assert r.decided_at is not None
    crossing = r.conv.crossing
    assert crossing is not None
    first, confirmed = _true_crossings(r)
    # The curve is exact: its first point below eps is the process's, to the grid time.
    assert crossing.t == pytest.approx(first)
    assert crossing.error == pytest.approx(r.true_errors[r.grid.index(first)], rel=1e-9)
    # The decision waits for the confirming grid time to complete: the reports that carry it
    # (at most one report period, then their delay, then the next evaluation).
    assert confirmed <= r.decided_at <= confirmed + 4.0 * rate * PERIOD


def test_at_a_high_rate_the_run_stops_on_the_curve_before_the_biased_estimate() -> None:
    # 200 units of t between two reports: the estimate, blind to the jumps between the
    # reports' times, sits above the true error (gossip.exchange.trace) and crosses eps later.
    r = _replay("line:10", 2000.0, t_end=20_000.0, seed=3)
    assert r.decided_at is not None
    crossing = r.conv.crossing
    assert crossing is not None
    first, _ = _true_crossings(r)
    assert crossing.t == pytest.approx(first)
    estimate = r.conv.estimate
    assert estimate is None or estimate.t > crossing.t + r.step


def test_once_the_members_change_the_old_curve_decides_nothing() -> None:
    topo = parse_topology("line:3")
    q = graph_quantities(topo)
    plan = Plan(topo, gossip_params("arg", q.mu_gossip, q.r_max), "test", 100.0, "", PERIOD)
    state = ClusterState(graph="line:3", expected=3, eps=EPS, rate=100.0)
    state.initial = [(1.0,), (0.0,), (0.0,)]
    book = ReportBook(plan, state, TOPICS)
    assert not book.exact_live
    assert book.exact_note().startswith("not collected")
    for node in range(3):
        payload = {"node": node, "t": 5.0, "wall": 0.0, "x": [0.0], "z": [0.0]}
        payload |= {
            "initial": list(state.initial[node]),
            "trace": [[0.0, 1.0 if node == 0 else 0.0]],
        }
        book.ingest(TOPICS.state(node), json.dumps(payload).encode())
    assert len(state.exact) == 1
    assert book.exact_live
    assert book.exact_note() == ""
    state.departed.add(2)  # before any trace has stopped the curve
    assert not book.exact_live
    assert "the members changed" in book.exact_note()
