"""The feed batches: only what changed since the last tick, once per tick for every tab."""

from __future__ import annotations

import json

import numpy as np
import pytest

from continuized.coordinator.dashboard.feed import Client, Feed, activity_levels
from continuized.coordinator.dashboard.layout import graph_layout
from continuized.coordinator.dashboard.runs import RunArchive
from continuized.coordinator.dashboard.synthetic import SyntheticCluster
from continuized.coordinator.dashboard.views import NODE_FIELDS
from continuized.gossip.graph.topology import parse_topology


def test_a_batch_holds_only_new_points_and_changed_nodes(cluster: SyntheticCluster) -> None:
    state = cluster.new_state()
    feed = Feed(state, RunArchive())
    cluster.feed(state, wall=cluster.epoch + 0.5)
    first = feed.tick(cluster.epoch + 0.5)
    assert len(first["nodes"]) == 25
    assert len(first["points"]) == 1

    # Two nodes report again, and one more error point is computed.
    for node in (3, 7):
        state.nodes[node].reports += 1
        state.nodes[node].wall = cluster.epoch + 0.6
    second = feed.tick(cluster.epoch + 0.7)
    ids = NODE_FIELDS.index("id")
    assert sorted(row[ids] for row in second["nodes"]) == [3, 7]
    assert second["points"] == []
    assert second["walls"] == [cluster.epoch + 0.6, cluster.epoch + 0.6]
    assert second["arrivals"] == [state.nodes[3].received, state.nodes[3].received]
    assert second["seq"] == first["seq"] + 1

    cluster.feed(state, wall=cluster.epoch + 1.0)
    third = feed.tick(cluster.epoch + 1.0)
    assert len(third["points"]) == 1
    assert third["points"][0][0] == state.history[-1].t
    assert third["summary"]["run_id"] == "run-a"


def test_every_client_gets_one_serialised_batch_per_tick(cluster: SyntheticCluster) -> None:
    state = cluster.new_state()
    feed = Feed(state, RunArchive())
    feed.tick(cluster.epoch)  # the first tick of a run tells tabs to load a snapshot
    tabs = [Client(), Client()]
    feed.clients.update(tabs)
    cluster.feed(state, wall=cluster.epoch + 0.3)
    feed.tick(cluster.epoch + 0.3)
    for tab in tabs:
        event, data = tab.queue.get_nowait()
        assert event == "batch"
        assert json.loads(data)["seq"] == feed.seq
        assert tab.queue.empty()


def test_a_tab_that_falls_behind_gets_a_reset_instead_of_a_backlog(
    cluster: SyntheticCluster,
) -> None:
    state = cluster.new_state()
    feed = Feed(state, RunArchive())
    feed.tick(cluster.epoch)
    slow = Client()
    feed.clients.add(slow)
    for k in range(40):
        feed.tick(cluster.epoch + k)
    assert slow.overflowed
    assert slow.queue.qsize() == 1
    assert slow.queue.get_nowait()[0] == "reset"


def test_achieved_rate_and_edge_activity_follow_the_activation_counts(
    cluster: SyntheticCluster,
) -> None:
    state = cluster.new_state()
    feed = Feed(state, RunArchive())
    wall = cluster.epoch
    for _ in range(30):  # 3 s of reports at 10 Hz
        wall += 0.1
        cluster.feed(state, wall=wall)
        feed.tick(wall)
    assert feed.rate_achieved is not None
    # The synthetic process fires at 400/s on average: allow for Poisson noise over ~2 s.
    assert 250 < feed.rate_achieved < 550
    assert max(feed.edge_levels) >= 2  # some edges fire at about their asked rate

    # The cluster goes quiet: activity decays to idle and the rate to zero.
    for _ in range(80):
        wall += 0.1
        feed.tick(wall)
    assert feed.edge_levels == [0] * cluster.topology.n_edges
    assert feed.rate_achieved == 0.0


def test_activity_levels_bin_against_the_expected_activity() -> None:
    expected = np.array([2.0, 2.0, 2.0, 2.0, 0.2, 0.2])
    got = activity_levels(np.array([0.0, 0.5, 2.0, 9.0, 1.0, 2.0]), expected)
    # A rarely used edge that just fired is normal, not hot; twice in a row is hot.
    assert got == [0, 1, 2, 3, 2, 3]


def test_layouts_are_normalised_and_keep_grid_coordinates() -> None:
    grid = graph_layout(parse_topology("grid:3x4"))
    assert len(grid.x) == 12
    assert min(grid.x) == 0.0
    assert max(grid.x) == 1.0
    # Row-major ids: node 1 is right of node 0, node 4 is below it.
    assert grid.x[1] > grid.x[0]
    assert grid.y[1] == grid.y[0]
    assert grid.y[4] < grid.y[0]
    assert (min(grid.y), max(grid.y)) == pytest.approx((1 / 6, 5 / 6), abs=1e-5)  # centred
    assert grid.x[4] == grid.x[0]
    for spec in ("line:30", "complete:10", "er:40:0.2:1", "star:8", "cycle:12"):
        topo = parse_topology(spec)
        lay = graph_layout(topo)
        assert len(lay.x) == topo.n
        assert len(lay.edges) == topo.n_edges
        assert all(0.0 <= c <= 1.0 for c in (*lay.x, *lay.y))
        assert len({(x, y) for x, y in zip(lay.x, lay.y, strict=True)}) == topo.n  # no overlap
