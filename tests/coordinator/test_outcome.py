"""The achieved rate of a run, from reports that are not simultaneous (coordinator.outcome)."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.outcome import node_shares, pace_of, rate_achieved
from coordinator.records import NodeView
from gossip.topology import Topology, parse_topology


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
