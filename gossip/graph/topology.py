"""Topologies: parse a spec such as ``grid:15x15``, check it, and attach edge probabilities.

Supported specs (N nodes, R rows, C columns):

==================  ==============================================================
``line:N``          path 0 - 1 - ... - N-1 (N >= 2)
``cycle:N``         ring (N >= 3)
``grid:RxC``        R x C grid, 4-neighbour (``grid:N`` is N x N)
``torus:RxC``       R x C grid with wrap-around (R, C >= 3)
``complete:N``      every pair is an edge (N >= 2)
``star:N``          node 0 joined to the N-1 others (N >= 2)
``er:N:p:seed``     Erdős–Rényi G(N, p), seeded; must come out connected
``rgg:N:r:seed``    random geometric graph in the unit square, radius r, seeded
``file:PATH``       edge list, one ``u v [weight]`` per line, ``#`` comments
==================  ==============================================================

Edge probabilities are uniform (``P_e = 1 / |E|``) unless ``weighted=True``, in which case they
are proportional to the edges' ``weight`` attribute (which must be finite and > 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import TopologyError

__all__ = ["KINDS", "Topology", "parse_topology", "topology_from_graph"]

KINDS = ("line", "cycle", "grid", "torus", "complete", "star", "er", "rgg", "file")


@dataclass(frozen=True, eq=False)
class Topology:
    """A connected graph on nodes ``0..n-1`` with a probability on its edges.

    Attributes
    ----------
    spec : str
        The spec it was built from (or a description).
    graph : networkx.Graph
        Nodes ``0..n-1``; each node keeps its original label in the ``label`` attribute.
    edges : ndarray of shape (n_edges, 2), int64
        Edge ``k`` joins ``edges[k, 0] < edges[k, 1]``; this order indexes ``probs``.
    probs : ndarray of shape (n_edges,), float64
        ``P_e``, positive, summing to 1: edge k fires at rate ``P_e`` per unit of t.
    """

    spec: str
    graph: nx.Graph
    edges: NDArray[np.int64]
    probs: NDArray[np.float64]
    _incident: tuple[tuple[tuple[int, int], ...], ...] = field(repr=False, default=())

    @property
    def n(self) -> int:
        """Number of nodes."""
        return int(self.graph.number_of_nodes())

    @property
    def n_edges(self) -> int:
        """Number of edges."""
        return int(self.edges.shape[0])

    def incident(self, node: int) -> tuple[tuple[int, int], ...]:
        """Return ``(edge_index, peer)`` for every edge at ``node``, in edge order."""
        return self._incident[node]

    def edge_index(self, u: int, v: int) -> int:
        """Return the index of edge {u, v}, or raise TopologyError if there is none."""
        for k, peer in self._incident[u]:
            if peer == v:
                return k
        raise TopologyError(f"no edge between nodes {u} and {v} in {self.spec}")


def topology_from_graph(graph: nx.Graph, spec: str = "graph", weighted: bool = False) -> Topology:
    """Check ``graph`` and return it as a :class:`Topology` with nodes relabelled ``0..n-1``.

    Raises
    ------
    TopologyError
        Fewer than 2 nodes, self-loops, a disconnected graph, or (with ``weighted``) a weight that
        is missing, not finite, or not > 0.
    """
    if graph.number_of_nodes() < 2:
        raise TopologyError(
            f"{spec}: a gossip topology needs at least 2 nodes, got {graph.number_of_nodes()}"
        )
    loops = list(nx.selfloop_edges(graph))
    if loops:
        raise TopologyError(f"{spec}: self-loops are not allowed, found {loops[:3]}")
    if not nx.is_connected(graph):
        parts = nx.number_connected_components(graph)
        raise TopologyError(
            f"{spec}: the graph is disconnected ({parts} components); gossip can only average "
            "a connected graph"
        )
    try:
        ordered = sorted(graph.nodes())
    except TypeError:
        ordered = list(graph.nodes())
    relabel = {label: i for i, label in enumerate(ordered)}
    g = nx.Graph()
    g.add_nodes_from((i, {"label": label}) for label, i in relabel.items())
    for u, v, data in graph.edges(data=True):
        g.add_edge(relabel[u], relabel[v], **data)
    edges = np.array(sorted((min(u, v), max(u, v)) for u, v in g.edges()), dtype=np.int64)
    if weighted:
        weights = np.array([_weight(g, int(u), int(v), spec) for u, v in edges], dtype=np.float64)
    else:
        weights = np.ones(len(edges), dtype=np.float64)
    probs = weights / weights.sum()
    incident: list[list[tuple[int, int]]] = [[] for _ in range(g.number_of_nodes())]
    for k, (u, v) in enumerate(edges):
        incident[int(u)].append((k, int(v)))
        incident[int(v)].append((k, int(u)))
    return Topology(spec, g, edges, probs, tuple(tuple(row) for row in incident))


def _weight(g: nx.Graph, u: int, v: int, spec: str) -> float:
    raw = g.edges[u, v].get("weight", 1.0)
    try:
        w = float(raw)
    except (TypeError, ValueError):
        raise TopologyError(f"{spec}: edge ({u}, {v}) has a non-numeric weight {raw!r}") from None
    if not (math.isfinite(w) and w > 0):
        raise TopologyError(
            f"{spec}: edge ({u}, {v}) has weight {raw!r}; weights must be finite and > 0"
        )
    return w


def parse_topology(spec: str, weighted: bool = False) -> Topology:
    """Build the :class:`Topology` described by ``spec`` (see the module docstring).

    Examples
    --------
    >>> t = parse_topology("grid:3x4")
    >>> t.n, t.n_edges, float(t.probs.sum())
    (12, 17, 1.0)
    """
    kind, _, rest = spec.strip().partition(":")
    kind = kind.lower()
    builder = _BUILDERS.get(kind)
    if builder is None:
        raise TopologyError(
            f"unknown topology kind {kind!r} in {spec!r}; valid kinds: {', '.join(KINDS)} "
            "(for example line:30, grid:15x15, er:50:0.2:1, file:edges.txt)"
        )
    if not rest:
        raise TopologyError(f"topology {spec!r} is missing its parameters, e.g. {_EXAMPLES[kind]}")
    graph = builder(rest, spec)
    return topology_from_graph(graph, spec=spec, weighted=weighted)


def _int(text: str, what: str, spec: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise TopologyError(f"{spec}: {what} must be an integer, got {text!r}") from None
    if value < minimum:
        raise TopologyError(f"{spec}: {what} must be >= {minimum}, got {value}")
    return value


def _float(text: str, what: str, spec: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TopologyError(f"{spec}: {what} must be a number, got {text!r}") from None
    if not (low < value <= high):
        raise TopologyError(f"{spec}: {what} must be in ({low}, {high}], got {value}")
    return value


def _dims(rest: str, spec: str, minimum: int) -> tuple[int, int]:
    parts = rest.lower().split("x")
    if len(parts) == 1:
        side = _int(parts[0], "side", spec, minimum)
        return side, side
    if len(parts) != 2:
        raise TopologyError(f"{spec}: expected RxC (for example 15x15) or N, got {rest!r}")
    return _int(parts[0], "rows", spec, minimum), _int(parts[1], "columns", spec, minimum)


def _grid(rest: str, spec: str) -> nx.Graph:
    rows, cols = _dims(rest, spec, 1)
    return nx.grid_2d_graph(rows, cols)


def _torus(rest: str, spec: str) -> nx.Graph:
    rows, cols = _dims(rest, spec, 3)
    return nx.grid_2d_graph(rows, cols, periodic=True)


def _seeded(rest: str, spec: str, what: str, high: float) -> tuple[int, float, int]:
    parts = rest.split(":")
    if len(parts) != 3:
        raise TopologyError(f"{spec}: expected N:{what}:seed, got {rest!r}")
    return (
        _int(parts[0], "N", spec, 2),
        _float(parts[1], what, spec, 0.0, high),
        _int(parts[2], "seed", spec, 0),
    )


def _er(rest: str, spec: str) -> nx.Graph:
    n, p, seed = _seeded(rest, spec, "p", 1.0)
    graph = nx.gnp_random_graph(n, p, seed=seed)
    if not nx.is_connected(graph):
        raise TopologyError(
            f"{spec}: G({n}, {p}) with seed {seed} is disconnected; use another seed or a larger "
            f"p (connected with high probability above ln(N)/N = {math.log(n) / n:.3g})"
        )
    return graph


def _rgg(rest: str, spec: str) -> nx.Graph:
    n, radius, seed = _seeded(rest, spec, "radius", math.sqrt(2.0))
    graph = nx.random_geometric_graph(n, radius, seed=seed)
    if not nx.is_connected(graph):
        raise TopologyError(
            f"{spec}: the random geometric graph with radius {radius} and seed {seed} is "
            f"disconnected; use another seed or a larger radius (about "
            f"{math.sqrt(2 * math.log(n) / (math.pi * n)):.3g} or more for N={n})"
        )
    return graph


def _file(rest: str, spec: str) -> nx.Graph:
    path = Path(rest).expanduser()
    if not path.is_file():
        raise TopologyError(f"{spec}: no such edge-list file {str(path)!r}")
    graph = nx.Graph()
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) not in (2, 3):
            raise TopologyError(
                f"{spec}: line {lineno} is {line.strip()!r}; expected 'u v' or 'u v weight'"
            )
        u, v = (int(w) if w.lstrip("-").isdigit() else w for w in words[:2])
        if len(words) == 3:
            try:
                weight = float(words[2])
            except ValueError:
                raise TopologyError(
                    f"{spec}: line {lineno} has weight {words[2]!r}; expected a number"
                ) from None
            graph.add_edge(u, v, weight=weight)
        else:
            graph.add_edge(u, v)
    return graph


def _sized(factory: Callable[[int], nx.Graph], minimum: int) -> Callable[[str, str], nx.Graph]:
    def build(rest: str, spec: str) -> nx.Graph:
        return factory(_int(rest, "N", spec, minimum))

    return build


_BUILDERS: dict[str, Callable[[str, str], nx.Graph]] = {
    "line": _sized(nx.path_graph, 2),
    "cycle": _sized(nx.cycle_graph, 3),
    "complete": _sized(nx.complete_graph, 2),
    "star": _sized(lambda n: nx.star_graph(n - 1), 2),
    "grid": _grid,
    "torus": _torus,
    "er": _er,
    "rgg": _rgg,
    "file": _file,
}

_EXAMPLES = {
    "line": "line:30",
    "cycle": "cycle:30",
    "complete": "complete:10",
    "star": "star:10",
    "grid": "grid:15x15",
    "torus": "torus:8x8",
    "er": "er:50:0.2:1",
    "rgg": "rgg:50:0.3:1",
    "file": "file:edges.txt",
}
