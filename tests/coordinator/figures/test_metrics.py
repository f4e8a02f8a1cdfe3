"""Error and mass drift from reports taken at different times; report parsing."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.coordinator.figures.metrics import (
    Snapshot,
    consistent_cut,
    estimate,
    parse_report,
    update_view,
)
from continuized.coordinator.figures.records import NodeView, PeerClock
from continuized.gossip.errors import ProtocolError
from continuized.gossip.model.jumps import jump
from continuized.gossip.model.mixing import mix
from continuized.gossip.wire.pubsub import Topics


def test_error_against_the_true_mean_and_exact_mass_after_mixing() -> None:
    initial = np.array([[1.0], [0.0], [0.0], [0.0]])
    eta = 0.3
    # A jump on edge {0, 1} at t = 0, then node 1 is observed at t = 2 and node 0 at t = 5.
    x0, z0, x1, z1 = jump(1.0, 1.0, 0.0, 0.0, c=1.5)
    xa, za = mix(x0, z0, eta, 5.0)
    xb, zb = mix(x1, z1, eta, 2.0)
    t = [5.0, 2.0, 0.0, 0.0]
    x = np.array([[xa], [xb], [0.0], [0.0]], dtype=np.float64)
    z = np.array([[za], [zb], [0.0], [0.0]], dtype=np.float64)
    est = estimate(t, x, z, initial, eta)
    assert est.t == 5.0
    assert est.mass_drift_rel == pytest.approx(0.0, abs=1e-15)
    expected_x1, _ = mix(x1, z1, eta, 5.0)
    assert est.values[1, 0] == pytest.approx(float(expected_x1))
    assert est.error == pytest.approx(0.5 * float(np.sum((est.values - 0.25) ** 2)))


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-5, 5), min_size=2, max_size=6),
    st.floats(0.0, 1.0),
    st.floats(0.0, 3.0),
)
def test_mass_is_conserved_by_mixing_reports_forward(
    values: list[float], eta: float, c: float
) -> None:
    n = len(values)
    init = np.array(values, dtype=np.float64)[:, None]
    x, z = init.copy(), init.copy()
    # Jumps along a path at time 0, then each node reports at its own time.
    for v in range(n - 1):
        xv, zv, xw, zw = jump(x[v], z[v], x[v + 1], z[v + 1], c)
        x[v], z[v], x[v + 1], z[v + 1] = xv, zv, xw, zw
    times = np.linspace(0.0, 3.0, n)
    xs, zs = mix(x, z, eta, times[:, None])
    est = estimate(times, xs, zs, init, eta)
    assert abs(est.values.sum() - init.sum()) <= 1e-9 * max(1.0, float(np.abs(init).sum()))


def _payload(**over: object) -> bytes:
    body = {
        "node": 3,
        "name": "n3",
        "address": "tcp://127.0.0.1:1",
        "t": 1.5,
        "wall": 10.0,
        "x": [0.5],
        "z": [0.25],
        "initial": [1.0],
        "final": False,
        "counters": {"initiated": 4, "served": 2},
        "rtt_ms": {"p50": 0.3, "p99": 1.2},
        "edges": {"2": 3, "4": 1},
    }
    body.update(over)
    return json.dumps(body).encode()


def test_parse_report_reads_the_documented_fields() -> None:
    rep = parse_report("gossip/c/node/3/state", _payload(), Topics("c"), expected=5, dim=1)
    assert rep["node"] == 3
    assert rep["x"] == (0.5,)
    assert rep["edges"] == {2: 3, 4: 1}
    assert rep["counters"]["initiated"] == 4
    assert rep["counters"]["rejected"] == 0
    assert rep["rtt_p99_ms"] == 1.2


def test_parse_report_reads_the_low_round_trip_and_the_clock_bound() -> None:
    clock = {"peer": 4, "offset": -0.0502, "error": 0.0003, "samples": 17}
    payload = _payload(rtt_ms={"p5": 0.1, "p50": 0.3, "p99": 1.2}, clock=clock)
    rep = parse_report("gossip/c/node/3/state", payload, Topics("c"), expected=5, dim=1)
    assert rep["rtt_p5_ms"] == 0.1
    assert rep["clock"] == PeerClock(peer=4, offset=-0.0502, error=0.0003, samples=17)
    view = NodeView(3)
    update_view(view, rep, received=11.0)
    assert (view.rtt_p5_ms, view.clock) == (0.1, rep["clock"])
    as_dict = view.as_dict(now=11.0, timeout=5.0)
    assert as_dict["rtt_ms"]["p5"] == 0.1
    assert as_dict["clock"] == clock


def test_an_older_nodes_report_has_neither_and_a_fresh_nodes_clock_is_null() -> None:
    rep = parse_report("gossip/c/node/3/state", _payload(), Topics("c"), expected=5, dim=1)
    assert (rep["rtt_p5_ms"], rep["clock"]) == (None, None)
    rep = parse_report("gossip/c/node/3/state", _payload(clock=None), Topics("c"), 5, dim=1)
    assert rep["clock"] is None
    view = NodeView(3, clock=PeerClock(1, 0.0, 0.001, 9))
    update_view(view, rep, received=11.0)
    assert view.clock is None  # the latest report's, not an older one's


def test_a_nodes_first_exchange_is_the_earliest_its_incarnations_reported() -> None:
    view = NodeView(3)
    for first, want in ((None, None), (500.5, 500.5), (512.0, 500.5), ("x", 500.5)):
        payload = _payload(first_exchange=first)
        update_view(view, parse_report("gossip/c/node/3/state", payload, Topics("c"), 5, 1), 1.0)
        assert view.first_exchange == want  # a restart's later one, or garbage, changes nothing


_GOOD_CLOCK = {"peer": 4, "offset": 0.01, "error": 0.001, "samples": 7}


@pytest.mark.parametrize(
    "clock",
    [
        "0.01",
        [4, 0.01, 0.001, 7],
        {**_GOOD_CLOCK, "peer": True},
        {**_GOOD_CLOCK, "peer": -1},
        {**_GOOD_CLOCK, "peer": "4"},
        {**_GOOD_CLOCK, "offset": "0.01"},
        {**_GOOD_CLOCK, "offset": None},
        {**_GOOD_CLOCK, "error": -0.001},
        {**_GOOD_CLOCK, "samples": 0},
        {**_GOOD_CLOCK, "samples": 2.5},
        {k: v for k, v in _GOOD_CLOCK.items() if k != "error"},
    ],
)
def test_a_malformed_clock_bound_is_dropped_and_the_report_kept(clock: object) -> None:
    payload = _payload(clock=clock, rtt_ms={"p5": "fast", "p50": 0.3, "p99": 1.2})
    rep = parse_report("gossip/c/node/3/state", payload, Topics("c"), expected=5, dim=1)
    assert rep["clock"] is None
    assert rep["rtt_p5_ms"] is None
    assert rep["rtt_p50_ms"] == 0.3
    assert rep["x"] == (0.5,)


def test_a_non_finite_clock_offset_is_dropped() -> None:
    # json.dumps writes NaN and Infinity, which json.loads reads back: not finite numbers.
    payload = _payload(clock={**_GOOD_CLOCK, "offset": float("inf")})
    rep = parse_report("gossip/c/node/3/state", payload, Topics("c"), expected=5, dim=1)
    assert rep["clock"] is None
    good = parse_report("gossip/c/node/3/state", _payload(clock=_GOOD_CLOCK), Topics("c"), 5, 1)
    assert good["clock"] == PeerClock(4, 0.01, 0.001, 7)


@pytest.mark.parametrize(
    ("topic", "payload", "words"),
    [
        ("gossip/c/node/2/state", _payload(), "topic's id"),
        ("gossip/c/node/3/state", b"{not json", "not JSON"),
        ("gossip/c/node/3/state", _payload(x=[float("nan")]), "'x'"),
        ("gossip/c/node/3/state", _payload(x=[1.0, 2.0]), "components"),
        ("gossip/c/node/9/state", _payload(node=9), "ids go from 0 to 4"),
        ("gossip/c/other/3/state", _payload(), "is not"),
    ],
)
def test_parse_report_rejects_bad_reports(topic: str, payload: bytes, words: str) -> None:
    with pytest.raises(ProtocolError, match=words):
        parse_report(topic, payload, Topics("c"), expected=5, dim=1)


def _snap(t: float, **edges: int) -> Snapshot:
    return Snapshot(t, (0.0,), (0.0,), {int(k[1:]): v for k, v in edges.items()})


def test_consistent_cut_moves_a_node_that_is_ahead_back() -> None:
    edges = np.array([[0, 1], [1, 2]], dtype=np.int64)
    histories = [
        [_snap(1.0, p1=0), _snap(2.0, p1=1), _snap(3.0, p1=2)],  # node 0 applied a 2nd exchange
        [_snap(1.5, p0=1, p2=0), _snap(2.5, p0=1, p2=1)],  # ... that node 1 has not applied yet
        [_snap(2.6, p1=1)],
    ]
    assert consistent_cut(histories, edges) == [1, 1, 0]
    # Node 2 is behind node 1 on their edge: node 1 goes back, which puts node 0 ahead again.
    histories[2] = [_snap(2.6, p1=0)]
    assert consistent_cut(histories, edges) == [1, 0, 0]
    # No report of node 2 is early enough: no consistent cut in what is kept.
    histories[1] = [_snap(2.5, p0=1, p2=1)]
    assert consistent_cut(histories, edges) is None


def test_consistent_cut_after_churn_follows_node_ids_and_skips_departed_ends() -> None:
    # Members 0, 2 and 9 (node 1 left, 9 joined), edges of the view by id: 0-2, 2-9, and 1-2
    # to the departed node, whose count is no one's business any more.
    edges = [(0, 2), (1, 2), (2, 9)]
    histories = [
        [_snap(1.0, p2=3), _snap(2.0, p2=4)],  # node 0 applied a 4th exchange with node 2 ...
        [_snap(1.5, p0=3, p1=7, p9=1), _snap(2.5, p0=3, p1=7, p9=2)],  # ... node 2 not yet
        [_snap(2.6, p2=2)],
    ]
    assert consistent_cut(histories, edges, ids=[0, 2, 9]) == [0, 1, 0]
    # By position instead of id, node 2's history would be read as node 1's: no such cut.
    assert consistent_cut(histories, edges, ids=[0, 2, 9]) != consistent_cut(histories, edges)


def _latest_cut_by_search(
    histories: list[list[Snapshot]], edges: list[tuple[int, int]]
) -> list[int] | None:
    # Counts only grow with time, so the consistent cuts are closed under the componentwise
    # maximum: the latest one is the maximum of them all.
    best: list[int] | None = None
    for cut in itertools.product(*(range(len(h)) for h in histories)):
        if all(
            histories[a][cut[a]].edges.get(b, 0) == histories[b][cut[b]].edges.get(a, 0)
            for a, b in edges
        ):
            best = (
                list(cut) if best is None else [max(p, q) for p, q in zip(best, cut, strict=True)]
            )
    return best


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_consistent_cut_is_the_latest_one(data: st.DataObject) -> None:
    n = data.draw(st.integers(2, 4))
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    edges = data.draw(st.lists(st.sampled_from(pairs), min_size=1, unique=True))
    histories: list[list[Snapshot]] = []
    for node in range(n):
        peers = [b if a == node else a for a, b in edges if node in (a, b)]
        counts = dict.fromkeys(peers, 0)
        reports = []
        for k in range(data.draw(st.integers(1, 4))):
            for peer in peers:  # counts never decrease
                counts[peer] += data.draw(st.integers(0, 1))
            reports.append(Snapshot(float(k), (0.0,), (0.0,), dict(counts)))
        histories.append(reports)
    expected = _latest_cut_by_search(histories, edges)
    assert consistent_cut(histories, np.array(edges, dtype=np.int64)) == expected
