"""Node positions for the network view, computed once per topology on the server.

The browser draws what it is given and never runs a layout itself: a layout of 225 nodes is
cheap for networkx and would be wasted work in every open tab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from continuized.gossip.graph.topology import Topology

__all__ = ["GraphLayout", "graph_layout"]


@dataclass(frozen=True, slots=True)
class GraphLayout:
    """Positions in the unit square, one per node, and the edges in topology order.

    Attributes
    ----------
    x, y : tuple of float
        ``x[v], y[v]`` is node ``v``'s position, both in ``[0, 1]``, y pointing up.
    edges : tuple of (int, int)
        Edge ``k`` is ``edges[k]``, the same order as ``Topology.edges`` (and its ``probs``).
    """

    x: tuple[float, ...]
    y: tuple[float, ...]
    edges: tuple[tuple[int, int], ...]

    def as_dict(self) -> dict[str, object]:
        """Return the layout as a JSON-ready dict ``{"x": [...], "y": [...], "edges": [...]}``."""
        return {"x": list(self.x), "y": list(self.y), "edges": [list(e) for e in self.edges]}


def graph_layout(topology: Topology, seed: int = 0) -> GraphLayout:
    """Return positions for ``topology``'s nodes, chosen by the shape of the graph.

    Grids and tori keep their row/column coordinates (their ``label`` attributes), lines and
    stars are laid out straight or radially, cycles and complete graphs on a circle, and any
    other graph by a seeded force-directed layout (Kamada-Kawai up to 150 nodes, where it reads
    better, spring layout above, where Kamada-Kawai's O(n^2) memory and time start to show).

    Parameters
    ----------
    topology : Topology
        The cluster's graph.
    seed : int
        Seed of the force-directed layout, so that a page reload shows the same picture.

    Examples
    --------
    >>> from continuized.gossip.graph.topology import parse_topology
    >>> lay = graph_layout(parse_topology("grid:2x3"))
    >>> len(lay.x), lay.edges[0]
    (6, (0, 1))
    """
    graph = topology.graph
    n = topology.n
    kind = topology.spec.partition(":")[0].strip().lower()
    labels = [graph.nodes[v].get("label") for v in range(n)]
    pos: dict[int, tuple[float, float]]
    if kind in ("grid", "torus") and all(_is_pair(lab) for lab in labels):
        # Rows go down the page, as when reading the grid.
        pos = {v: (float(lab[1]), -float(lab[0])) for v, lab in enumerate(labels)}
    elif kind == "line":
        pos = _snake(n)
    elif kind in ("cycle", "complete"):
        pos = {v: (math.cos(2 * math.pi * v / n), math.sin(2 * math.pi * v / n)) for v in range(n)}
    elif n <= 150:
        raw = nx.kamada_kawai_layout(graph)
        pos = {int(v): (float(p[0]), float(p[1])) for v, p in raw.items()}
    else:
        raw = nx.spring_layout(graph, seed=seed)
        pos = {int(v): (float(p[0]), float(p[1])) for v, p in raw.items()}
    xs, ys = _normalise([pos[v][0] for v in range(n)], [pos[v][1] for v in range(n)])
    edges = tuple((int(u), int(v)) for u, v in topology.edges)
    return GraphLayout(xs, ys, edges)


def _is_pair(label: object) -> bool:
    return isinstance(label, tuple) and len(label) == 2 and all(isinstance(c, int) for c in label)


def _snake(n: int) -> dict[int, tuple[float, float]]:
    # A long line drawn in one row becomes a hairline; folding it into a few rows, turning at
    # the ends like a snake, keeps neighbours adjacent and the picture square-ish.
    width = max(2, math.ceil(math.sqrt(2 * n)))
    pos: dict[int, tuple[float, float]] = {}
    for v in range(n):
        row, col = divmod(v, width)
        if row % 2:
            col = width - 1 - col
        pos[v] = (float(col), -float(row))
    return pos


def _normalise(xs: list[float], ys: list[float]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    # One common scale for both axes keeps the aspect ratio (a 3x15 grid stays long and thin);
    # the shorter side is centred in the unit square.
    x0, y0 = min(xs), min(ys)
    wide, high = max(xs) - x0, max(ys) - y0
    span = max(wide, high) or 1.0
    dx, dy = (1.0 - wide / span) / 2.0, (1.0 - high / span) / 2.0
    return (
        tuple(round(dx + (x - x0) / span, 5) for x in xs),
        tuple(round(dy + (y - y0) / span, 5) for y in ys),
    )
