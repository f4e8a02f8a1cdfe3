"""The outcome of a run (coordinator.outcome): the achieved rate, from reports that are not
simultaneous, and the final error at the stop."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.outcome import error_at_stop, node_shares, pace_of, rate_achieved
from coordinator.records import NodeView
from gossip.mixing import mix
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


def _states_reported_after_the_stop(
    deviation: float, backs: np.ndarray, eta: float, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Final states ``deviation`` away from the mean at the stop t = 1000, each mixed forward
    (exact) to its node's report, ``backs`` later: (t, x, z, initial, error at the stop)."""
    rng = np.random.default_rng(seed)
    n = backs.shape[0]
    initial = rng.normal(1.0, 1.0, (n, 1))
    x0 = initial.mean() + deviation * rng.standard_normal((n, 1))
    z0 = initial.mean() + 3.0 * deviation * rng.standard_normal((n, 1))
    # The stopped states hold the initial sum, in x and in z (ARG's jumps and mixing keep both).
    x0 += initial.mean() - x0.mean()
    z0 += initial.mean() - z0.mean()
    x, z = mix(x0, z0, eta, backs[:, None])
    truth = 0.5 * float(np.sum((x0 - initial.mean()) ** 2))
    return 1000.0 + backs, x, z, initial, truth


@pytest.mark.parametrize("deviation", [1e-2, 1e-5])  # eps 1e-8 on 8 nodes: about 5e-5
def test_the_final_error_is_told_at_the_stop_although_a_node_reported_long_after(
    deviation: float,
) -> None:
    # The secured joiner of test_churn_secure once lingered 184 t after the stop (eta 0.036):
    # x drifts towards (x + z) / 2 meanwhile, so only the states mixed back give the error the
    # run stopped at, and the rounding that mixing back amplifies (e^13) is far below it.
    backs = np.array([2.0, 3.0, 1.0, 184.0, 2.5, 1.5, 2.0, 3.0])
    t, x, z, initial, truth = _states_reported_after_the_stop(deviation, backs, eta=0.036)
    got = error_at_stop(t, x, z, initial, 0.036, t_stop=1000.0)
    assert got.t == 1000.0
    assert got.error == pytest.approx(truth, rel=1e-3)
    assert got.mass_drift_rel <= 1e-13  # forward, at the latest report: exact
    forward = error_at_stop(t, x, z, initial, 0.036, t_stop=None)
    assert forward.t == float(t.max())
    assert forward.error != pytest.approx(truth, rel=1e-2)  # what the summary said before


def test_at_the_floor_of_the_floats_the_error_stays_forward() -> None:
    # Nodes equal but for rounding: mixing back 184 t would turn the rounding into the error.
    backs = np.array([1.0, 184.0, 2.0, 1.0])
    t, x, z, initial, _ = _states_reported_after_the_stop(1e-17, backs, eta=0.036)
    got = error_at_stop(t, x, z, initial, 0.036, t_stop=1000.0)
    assert got.t == float(t.max())
    assert got.error <= 1e-28
