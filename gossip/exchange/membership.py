"""Churn in the pure core: nodes that leave for good, nodes that join, and membership views.

Naming
------
``epoch`` already means the Unix time origin of a run (``t = rate * (now - epoch)``). The
version of the membership is therefore called a *view* here: :class:`View` number ``k``
(user docs say "membership epoch k"). A view is the member set, its graph, the parameters
recomputed from that graph (``eta``, ``c``, the edge probabilities), and ``start``, the time
``T_k`` (units of t) from which it holds.

Theory of operation
-------------------
**Intervals.** View k holds on ``[T_k, T_{k+1})``. Every jump belongs to the view whose
interval holds its time T and is computed with that view's ``c``, step and edge set; a jump
never mixes two views (:func:`admit` is the rule a server applies to a request). Between
jumps a node's pair mixes with view k's ``eta`` on ``[T_k, T_{k+1})``: the mixing is
piecewise, with the switch at the shared time ``T_{k+1}``, so both ends of a surviving edge
keep moving their rows by the same linear flow and their rows stay opposite.

**The settlement rule (stated once, here).** A node's value is its initial value plus the sum
over its edges of the flows it applied (:mod:`gossip.model.ledger`). When node v leaves, every
neighbour u *drops its whole row for the edge {u, v}*: the flows into ``x`` and into ``z``
together (:func:`carry_ledger`). Then at every t::

    sum over survivors of x(t) = sum over survivors of z(t) = sum of survivors' initial values

exactly, because (1) a node's own row ``(x0, x0)`` has half-difference 0 and is a fixed point
of the mixing, whatever ``eta``; (2) the rows of an edge between two survivors are opposite
at its ends and moved by the same linear flow, so they cancel; (3) the rows on edges to v
are gone. Dropping only the ``x`` part would leave ``sum z != sum x`` among the survivors,
and the mixing, which keeps each node's ``x + z``, would then pull ``sum x`` to
``(sum x + sum z) / 2``: ARG's second variable must be settled with the first. What v itself
held does not matter: it is not a survivor. A node that joins starts with its value and
zero rows, so the members' total gains exactly its value and the mean moves to include it.

**When an edge may be settled.** Only once no exchange on it can still be applied at this
end: the row is dropped at the view switch, and from then on a flow for the dropped edge
(a late reply, a repeated request) is rejected and counted, never applied
(:meth:`Switch.late_flow` raises :class:`~gossip.errors.ProtocolError`). Whatever the leaver
applied or not on that edge is irrelevant to the survivors' sum, so no handshake with the
leaver is needed for exactness; it is needed only so the leaver stops serving first.

**Late flows of an earlier view on a kept edge** (a reply to an exchange at ``T < T_e``
that arrives after the switch) stay exact: the flow is mixed with the old ``eta`` from T to
``T_e`` and then added at ``T_e`` in the new ledger (:meth:`Switch.late_flow`), which is what
the other end's row did. However many switches the reply arrives after, it is mixed through
each view it crosses with that view's ``eta`` and added at the current view's start
(:meth:`gossip.exchange.switching.Views.carried`); never dropped, because the other end
applied it. (A released exchange can outlive two switches: two deaths in one coordinator tick
make two views a nanosecond apart.)

Node ids are stable names of members (never reused); edges are pairs of ids, and an edge's
index is its position in the view's sorted edge list (so it can change from view to view:
:meth:`View.edge_index` maps a pair to it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError, ProtocolError, TopologyError
from continuized.gossip.model.algorithms import Algorithm, parse_algorithm
from continuized.gossip.model.jumps import Flow, late_flow
from continuized.gossip.model.ledger import Ledger

__all__ = [
    "ADMISSION",
    "Admission",
    "Switch",
    "View",
    "admit",
    "attach_neighbors",
    "carry_ledger",
    "carry_to",
    "first_view",
    "join_view",
    "leave_view",
    "make_view",
    "view_from_dict",
]

FloatArray = NDArray[np.float64]
Pair = tuple[int, int]


@dataclass(frozen=True, slots=True)
class View:
    """One version of the membership ("membership epoch" ``number`` in the user docs).

    Attributes
    ----------
    number : int
        The view's number, 0 for the bootstrap graph, +1 at every change.
    start : float
        ``T_k``, the time (units of t) from which the view holds.
    members : tuple of int
        The members' ids, sorted.
    edges : tuple of (int, int)
        The graph's edges as sorted id pairs, sorted.
    ids : tuple of int
        Each edge's stable id (its index in the nodes' ledgers and messages): an edge keeps
        its id from view to view, a new edge gets ``next_id``; ids are never reused.
    probs : tuple of float
        ``P_e`` of each edge (uniform), summing to 1.
    algorithm : Algorithm
        RG or ARG.
    eta, c, theta : float
        The parameters recomputed from this graph (:func:`gossip.model.algorithms.gossip_params`).
    next_id : int
        The id the next new edge gets.
    """

    number: int
    start: float
    members: tuple[int, ...]
    edges: tuple[Pair, ...]
    ids: tuple[int, ...]
    probs: tuple[float, ...]
    algorithm: Algorithm
    eta: float
    c: float
    theta: float
    next_id: int

    def edge_index(self, u: int, v: int) -> int:
        """Return the stable id of edge {u, v} in this view, or raise TopologyError."""
        pair = (min(u, v), max(u, v))
        try:
            return self.ids[self.edges.index(pair)]
        except ValueError:
            raise TopologyError(
                f"no edge {pair} in membership view {self.number}; its edges: "
                f"{list(self.edges)[:8]}"
            ) from None

    def incident(self, node: int) -> list[tuple[int, int]]:
        """Return ``(edge_id, peer)`` for every edge of ``node`` in this view."""
        out = []
        for k, (a, b) in zip(self.ids, self.edges, strict=True):
            if node in (a, b):
                out.append((k, b if a == node else a))
        return out

    def prob(self, edge_id: int) -> float:
        """Return ``P_e`` of the edge with stable id ``edge_id``."""
        return self.probs[self.ids.index(edge_id)]

    def as_dict(self) -> dict[str, object]:
        """Return the view as a JSON-ready dict (what the coordinator publishes)."""
        return {
            "number": self.number,
            "start": self.start,
            "members": list(self.members),
            "edges": [list(e) for e in self.edges],
            "ids": list(self.ids),
            "probs": list(self.probs),
            "next_id": self.next_id,
            "algorithm": self.algorithm.value,
            "eta": self.eta,
            "c": self.c,
            "theta": self.theta,
        }


def view_from_dict(data: object) -> View:
    """Return the :class:`View` of :meth:`View.as_dict`'s dict (what a node receives).

    Raises
    ------
    ProtocolError
        A field is missing or malformed.
    """
    try:
        assert isinstance(data, dict)
        edges = tuple((int(a), int(b)) for a, b in data["edges"])
        ids = tuple(int(k) for k in data["ids"])
        probs = tuple(float(p) for p in data["probs"])
        view = View(
            number=int(data["number"]),
            start=float(data["start"]),
            members=tuple(int(m) for m in data["members"]),
            edges=edges,
            ids=ids,
            probs=probs,
            algorithm=parse_algorithm(str(data["algorithm"])),
            eta=float(data["eta"]),
            c=float(data["c"]),
            theta=float(data["theta"]),
            next_id=int(data["next_id"]),
        )
    except (AssertionError, KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"a membership view message is malformed: {exc!r}") from None
    if not (len(edges) == len(ids) == len(probs) and np.isfinite([view.start, view.eta]).all()):
        raise ProtocolError(
            f"membership view {view.number}: {len(edges)} edges, {len(ids)} ids and "
            f"{len(probs)} probabilities must match, start and eta be finite"
        )
    return view


def _pairs(edges: Iterable[Sequence[int]]) -> tuple[Pair, ...]:
    out = set()
    for e in edges:
        u, v = int(e[0]), int(e[1])
        if u == v:
            raise TopologyError(f"self-loop on node {u}; a view's edges join two members")
        out.add((min(u, v), max(u, v)))
    return tuple(sorted(out))


def make_view(
    number: int,
    start: float,
    members: Iterable[int],
    edges: Iterable[Sequence[int]],
    algorithm: Algorithm | str = Algorithm.ARG,
    previous: View | None = None,
) -> View:
    """Return the view of ``members`` joined by ``edges``, its parameters recomputed.

    Edges of ``previous`` keep their ids; new ones are numbered from ``previous.next_id``
    (from 0, in sorted order, without ``previous``: then ids are the bootstrap's indices).

    The graph quantities (``mu_gossip``, ``R_max``) come from :mod:`gossip.graph.spectral`, the
    parameters from :func:`gossip.model.algorithms.gossip_params`, as at bootstrap.

    Raises
    ------
    TopologyError
        An edge names a non-member, or the graph is disconnected (the survivors of a leave
        could then not reach one mean: the leave is refused).
    """
    import networkx as nx  # lazy: a node process only carries views, never builds them

    from continuized.gossip.graph.spectral import graph_quantities
    from continuized.gossip.graph.topology import topology_from_graph
    from continuized.gossip.model.algorithms import gossip_params

    algo = algorithm if isinstance(algorithm, Algorithm) else parse_algorithm(algorithm)
    ids = tuple(sorted({int(m) for m in members}))
    pairs = _pairs(edges)
    strangers = sorted({n for p in pairs for n in p} - set(ids))
    if strangers:
        raise TopologyError(f"edges name non-members {strangers}; members are {list(ids)}")
    if not (np.isfinite(start) and number >= 0):
        raise ConfigError(f"need a number >= 0 and a finite start, got {number!r}, {start!r}")
    graph = nx.Graph()
    graph.add_nodes_from(ids)
    graph.add_edges_from(pairs)
    topology = topology_from_graph(graph, spec=f"membership view {number}")
    quantities = graph_quantities(topology)
    params = gossip_params(algo, quantities.mu_gossip, quantities.r_max)
    probs = tuple(float(p) for p in topology.probs)  # same sorted order: relabel is monotone
    known = {} if previous is None else dict(zip(previous.edges, previous.ids, strict=True))
    next_id = 0 if previous is None else previous.next_id
    edge_ids = []
    for pair in pairs:
        if pair not in known:
            known[pair], next_id = next_id, next_id + 1
        edge_ids.append(known[pair])
    return View(
        number,
        float(start),
        ids,
        pairs,
        tuple(edge_ids),
        probs,
        algo,
        params.eta,
        params.c,
        params.theta,
        next_id,
    )


def first_view(
    n: int, edges: Iterable[Sequence[int]], algorithm: Algorithm | str = Algorithm.ARG
) -> View:
    """Return view 0: members ``0..n-1`` joined by ``edges``, from ``t = 0``."""
    return make_view(0, 0.0, range(n), edges, algorithm)


def leave_view(view: View, node: int, start: float) -> View:
    """Return the next view, from ``start``: ``view`` without ``node`` and its edges.

    Raises
    ------
    ConfigError
        ``node`` is not a member, or ``start`` is not after ``view.start``.
    TopologyError
        The survivors would be disconnected (name the leave of another node, or add edges).
    """
    if node not in view.members:
        raise ConfigError(f"node {node} is not a member of view {view.number}: {view.members}")
    _check_start(view, start)
    members = [m for m in view.members if m != node]
    edges = [e for e in view.edges if node not in e]
    return make_view(view.number + 1, start, members, edges, view.algorithm, view)


def join_view(view: View, node: int, neighbors: Iterable[int], start: float) -> View:
    """Return the next view, from ``start``: ``view`` plus ``node`` joined to ``neighbors``.

    Raises
    ------
    ConfigError
        ``node`` is already a member, a neighbour is not, no neighbour is given, or ``start``
        is not after ``view.start``.
    """
    peers = sorted({int(p) for p in neighbors})
    if node in view.members:
        raise ConfigError(f"node {node} is already a member of view {view.number}")
    if not peers or not set(peers) <= set(view.members):
        raise ConfigError(
            f"a joining node needs >= 1 neighbour among the members {list(view.members)}, "
            f"got {peers}"
        )
    _check_start(view, start)
    edges = [*view.edges, *((p, node) for p in peers)]
    return make_view(view.number + 1, start, [*view.members, node], edges, view.algorithm, view)


def attach_neighbors(view: View, k: int, rng: np.random.Generator) -> list[int]:
    """Return ``k`` distinct members drawn uniformly with ``rng``: where a joiner attaches."""
    if not 1 <= k <= len(view.members):
        raise ConfigError(f"k must be in 1..{len(view.members)} (the members), got {k!r}")
    chosen = rng.choice(np.array(view.members), size=k, replace=False)
    return sorted(int(x) for x in chosen)


def _check_start(view: View, start: float) -> None:
    if not (np.isfinite(start) and start > view.start):
        raise ConfigError(
            f"the next view must start after view {view.number} (t = {view.start}), "
            f"got start={start!r}"
        )


@dataclass(frozen=True, slots=True)
class Switch:
    """What a node remembers of its last view switch: enough to place a late flow exactly."""

    old: View
    new: View
    node: int

    def late_flow(self, u: int, v: int, flow: Flow, t: float) -> tuple[int, Flow, float]:
        """Return ``(edge, flow, t_add)``: how to add, in the new ledger, an old-view flow.

        ``flow`` came in through edge {u, v} at time ``t`` of the old view (``t < T_e``). It
        is mixed with the old ``eta`` from ``t`` to ``T_e = new.start``, then added at
        ``T_e`` on the edge's new index: exactly what the other end's row did.

        Raises
        ------
        ProtocolError
            The edge was dropped at the switch (settled: its flows are never applied), or
            ``t`` is not in the old view's interval.
        """
        if not self.old.start <= t < self.new.start:
            raise ProtocolError(
                f"a flow at t={t!r} is not of view {self.old.number} "
                f"([{self.old.start}, {self.new.start}))"
            )
        pair = (min(u, v), max(u, v))
        if pair not in self.new.edges:
            raise ProtocolError(
                f"edge {pair} was settled at the switch to view {self.new.number}: "
                "a late flow on it is rejected, never applied"
            )
        moved = late_flow(flow, self.old.eta, self.new.start - t)
        return self.new.edge_index(*pair), moved, self.new.start


def carry_ledger(ledger: Ledger, old: View, new: View, node: int) -> tuple[Ledger, Switch]:
    """Return ``node``'s ledger in view ``new``, and the :class:`Switch` made.

    Every row is mixed with the old ``eta`` to ``T_e = new.start``; the rows of edges kept
    (same id) mix with the new ``eta`` from there; the rows of edges to
    members that left are dropped whole, ``x`` and ``z`` parts together (the settlement rule
    of the module header); new edges start at zero. The node's own row is its initial value.

    ``ledger`` must hold no jump after ``T_e`` (a jump at ``T >= T_e`` is of the new view).

    Raises
    ------
    ConfigError
        ``node`` is not a member of both views, ``new`` does not follow ``old``, or the
        ledger's edges are not ``node``'s edges in ``old``.
    """
    if new.number != old.number + 1 or not new.start > old.start:
        raise ConfigError(
            f"view {new.number} from t={new.start} does not follow view {old.number} "
            f"from t={old.start}"
        )
    if node not in old.members or node not in new.members:
        raise ConfigError(f"node {node} must be a member of views {old.number} and {new.number}")
    old_edges = old.incident(node)
    if sorted(k for k, _ in old_edges) != sorted(ledger.edges):
        raise ConfigError(
            f"ledger edges {list(ledger.edges)} are not node {node}'s edges in view "
            f"{old.number}: {[k for k, _ in old_edges]}"
        )
    return carry_to(ledger, new, node), Switch(old, new, node)


def carry_to(ledger: Ledger, new: View, node: int) -> Ledger:
    """Return ``node``'s ledger in view ``new``: :func:`carry_ledger` without the old view's
    checks, for a node that knows only its own edges (edge ids are never reused, so a row
    whose id is still ``node``'s in ``new`` is the same edge)."""
    t_e = new.start
    edges = [k for k, _ in new.incident(node)]
    carried = Ledger(ledger.initial, edges, new.eta, t0=t_e)
    for k in ledger.edges:
        if k in edges:  # kept; an edge to a leaver is settled by not carrying it
            carried.set_edge_total(k, ledger.edge_total(k, t_e), t_e)
    return carried


class Admission(StrEnum):
    """What a server does with a request, given its view and the request's."""

    SERVE = "serve"  # same view, T in its interval
    SWITCH = "switch"  # the request is of our next view, known to us: switch, then serve
    REFUSE = "refuse"  # Busy-like: never applied; the initiator retries in the right view


ADMISSION: dict[tuple[str, bool], Admission] = {
    # (how the request's view compares with ours, T in that view's interval)
    ("same", True): Admission.SERVE,
    ("same", False): Admission.REFUSE,  # T past our view's end: the initiator must switch
    ("next", True): Admission.SWITCH,
    ("next", False): Admission.REFUSE,
    ("older", True): Admission.REFUSE,  # the initiator retries after switching
    ("older", False): Admission.REFUSE,
    ("unknown", True): Admission.REFUSE,  # a view we have not been told of yet
    ("unknown", False): Admission.REFUSE,
}
"""(relation, T in the request view's interval) -> what the server does: a jump is applied
only when both ends are in the same view and T lies in it, so no jump mixes two views."""


def admit(ours: View, upcoming: View | None, request_view: int, t: float) -> Admission:
    """Return what a server in view ``ours`` does with a request of ``request_view`` at ``t``.

    ``upcoming`` is the next view if the coordinator has announced it (else ``None``).
    The request's view interval is ``[start, next start)``; see :data:`ADMISSION`.
    """
    if request_view == ours.number:
        end = upcoming.start if upcoming is not None else np.inf
        return ADMISSION[("same", ours.start <= t < end)]
    if upcoming is not None and request_view == upcoming.number:
        return ADMISSION[("next", t >= upcoming.start)]
    relation = "older" if request_view < ours.number else "unknown"
    return ADMISSION[(relation, True)]
