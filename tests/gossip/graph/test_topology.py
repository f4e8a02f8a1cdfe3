"""Topology specs: every kind, edge probabilities, and clear errors for bad input."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from continuized.gossip.errors import TopologyError
from continuized.gossip.graph.topology import parse_topology, topology_from_graph


@pytest.mark.parametrize(
    ("spec", "n", "n_edges"),
    [
        ("line:30", 30, 29),
        ("cycle:6", 6, 6),
        ("grid:15x15", 225, 2 * 15 * 14),
        ("grid:4", 16, 24),
        ("grid:3x5", 15, 3 * 4 + 5 * 2),
        ("torus:4x5", 20, 40),
        ("complete:10", 10, 45),
        ("star:7", 7, 6),
        ("er:40:0.3:1", 40, None),
        ("rgg:60:0.35:2", 60, None),
    ],
)
def test_kinds_build_connected_graphs_with_uniform_probabilities(
    spec: str, n: int, n_edges: int | None
) -> None:
    topo = parse_topology(spec)
    assert topo.n == n
    if n_edges is not None:
        assert topo.n_edges == n_edges
    assert nx.is_connected(topo.graph)
    assert np.all(topo.edges[:, 0] < topo.edges[:, 1])
    np.testing.assert_allclose(topo.probs, 1.0 / topo.n_edges)
    assert topo.probs.sum() == pytest.approx(1.0)


def test_incident_and_edge_index_agree_with_edges() -> None:
    topo = parse_topology("grid:3x3")
    for node in range(topo.n):
        for k, peer in topo.incident(node):
            assert {int(topo.edges[k, 0]), int(topo.edges[k, 1])} == {node, peer}
            assert topo.edge_index(node, peer) == k == topo.edge_index(peer, node)
    with pytest.raises(TopologyError, match="no edge between nodes 0 and 8"):
        topo.edge_index(0, 8)


def test_seeded_random_graphs_are_reproducible() -> None:
    a, b = parse_topology("er:30:0.3:4"), parse_topology("er:30:0.3:4")
    np.testing.assert_array_equal(a.edges, b.edges)
    assert not np.array_equal(a.edges, parse_topology("er:30:0.3:5").edges)


def test_file_edge_list_with_weights(tmp_path: Path) -> None:
    path = tmp_path / "g.txt"
    path.write_text("# a weighted triangle plus a tail\n0 1 1\n1 2 2 # heavier\n0 2 1\n\n2 3 4\n")
    topo = parse_topology(f"file:{path}", weighted=True)
    assert topo.n == 4
    assert topo.edges.tolist() == [[0, 1], [0, 2], [1, 2], [2, 3]]
    np.testing.assert_allclose(topo.probs, np.array([1, 1, 2, 4]) / 8)
    unweighted = parse_topology(f"file:{path}")
    np.testing.assert_allclose(unweighted.probs, 0.25)


def test_file_with_string_labels_is_relabelled(tmp_path: Path) -> None:
    path = tmp_path / "g.txt"
    path.write_text("a b\nb c\n")
    topo = parse_topology(f"file:{path}")
    assert topo.n == 3
    assert [topo.graph.nodes[i]["label"] for i in range(3)] == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("ring:5", "unknown topology kind 'ring'"),
        ("line", "missing its parameters"),
        ("line:1", "N must be >= 2, got 1"),
        ("line:abc", "N must be an integer, got 'abc'"),
        ("cycle:2", "N must be >= 3"),
        ("grid:3x", "columns must be an integer"),
        ("grid:1x1", "at least 2 nodes"),
        ("grid:2x3x4", "expected RxC"),
        ("torus:2x5", "rows must be >= 3"),
        ("er:30:0.01:1", "disconnected"),
        ("er:30:1.5:1", "p must be in (0.0, 1.0]"),
        ("er:30:0.5", "expected N:p:seed"),
        ("rgg:50:0.05:1", "disconnected"),
        ("file:/no/such/file.txt", "no such edge-list file"),
    ],
)
def test_bad_specs_name_the_value(spec: str, needle: str) -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology(spec)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("text", "weighted", "needle"),
    [
        ("0 1\n2 3\n", False, "disconnected (2 components)"),
        ("0 1\n1 1\n", False, "self-loops"),
        ("0 1 2 3\n", False, "line 1"),
        ("0 1 heavy\n", False, "weight 'heavy'"),
        ("0 1 1\n1 2 0\n", True, "weights must be finite and > 0"),
        ("0 1 1\n1 2 -2\n", True, "weights must be finite and > 0"),
        ("# nothing\n", False, "at least 2 nodes"),
    ],
)
def test_bad_edge_lists(tmp_path: Path, text: str, weighted: bool, needle: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(TopologyError) as info:
        parse_topology(f"file:{path}", weighted=weighted)
    assert needle in str(info.value)


def test_from_graph_rejects_single_node() -> None:
    g = nx.Graph()
    g.add_node(0)
    with pytest.raises(TopologyError, match="at least 2 nodes, got 1"):
        topology_from_graph(g)
