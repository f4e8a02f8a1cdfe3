"""The network's error and mass drift, from node reports taken at different times (pure).

Nodes report ``(t_v, x_v, z_v)`` each at its own time ``t_v``. Between activations every node
only mixes its own pair, so the best estimate of node v at a common time ``t >= t_v`` is its
report mixed forward with the core's closed form, ``mix(x_v, z_v, eta, t - t_v)``
(:func:`gossip.model.mixing.mix`). This ignores the jumps in ``(t_v, t]``, so while the cluster runs
the result is an estimate whose accuracy is set by the report period; after a clean stop there
are no more jumps and the result is exact.

With ``m`` nodes, initial values ``x_v(0)`` and their mean ``xbar``:

* error ``= sum_v 1/2 |x_v(t) - xbar|^2`` (the paper's criterion);
* relative mass drift ``= |sum_v x_v(t) - sum_v x_v(0)| / sum_v |x_v(0)|`` (norms for vectors;
  the denominator is the scale of the values, so the drift stays meaningful when the sum is 0).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.coordinator.figures.records import COUNTER_NAMES, NodeView, PeerClock
from continuized.gossip.errors import ProtocolError
from continuized.gossip.model.mixing import mix
from continuized.gossip.wire.checks import unpacked
from continuized.gossip.wire.pubsub import Topics

__all__ = ["Estimate", "Snapshot", "consistent_cut", "estimate", "parse_report", "update_view"]


@dataclass(frozen=True, slots=True)
class Estimate:
    """The network state mixed to a common time.

    Attributes
    ----------
    t : float
        The common time (the latest report's t).
    error : float
        ``sum_v 1/2 |x_v(t) - mean|^2``.
    mass_drift_rel : float
        ``|sum_v x_v(t) - sum_v x_v(0)| / sum_v |x_v(0)|``.
    values : ndarray of shape (n, dim)
        ``x_v(t)`` by node.
    mean : ndarray of shape (dim,)
        The true mean of the initial values.
    """

    t: float
    error: float
    mass_drift_rel: float
    values: NDArray[np.float64]
    mean: NDArray[np.float64]


def estimate(
    t: Sequence[float] | NDArray[np.float64],
    x: NDArray[np.float64],
    z: NDArray[np.float64],
    initial: NDArray[np.float64],
    eta: float,
    at: float | None = None,
) -> Estimate:
    """Mix every node's report to a common time and measure the error and the mass drift.

    Parameters
    ----------
    t : array of shape (n,)
        Each node's report time (units of t).
    x, z : arrays of shape (n, dim)
        Each node's reported values.
    initial : array of shape (n, dim)
        Each node's initial value.
    eta : float
        Mixing rate (0 for RG).
    at : float, optional
        The common time; default ``max(t)``.

    Examples
    --------
    >>> import numpy as np
    >>> e = estimate([1.0, 1.0], np.array([[0.5], [0.5]]), np.array([[0.5], [0.5]]),
    ...              np.array([[1.0], [0.0]]), eta=0.1)
    >>> e.error, e.mass_drift_rel
    (0.0, 0.0)
    """
    with np.errstate(over="ignore", invalid="ignore"):  # a diverging run gives inf, not noise
        return _estimate(t, x, z, initial, eta, at)


def _estimate(
    t: Sequence[float] | NDArray[np.float64],
    x: NDArray[np.float64],
    z: NDArray[np.float64],
    initial: NDArray[np.float64],
    eta: float,
    at: float | None,
) -> Estimate:
    times = np.asarray(t, dtype=np.float64)
    common = float(times.max()) if at is None else float(at)
    xs, _ = mix(x, z, eta, (common - times)[:, None])
    init = np.asarray(initial, dtype=np.float64)
    mean = init.mean(axis=0)
    error = 0.5 * float(np.sum((xs - mean) ** 2))
    scale = float(np.sum(np.linalg.norm(init, axis=1)))
    drift = float(np.linalg.norm(xs.sum(axis=0) - init.sum(axis=0)))
    rel = drift / scale if scale > 0 else drift
    return Estimate(common, error, rel, xs, mean)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One node report, as the consistent-cut search needs it.

    ``edges`` maps a peer's id to the exchanges this node has applied on that edge so far.
    ``y`` is the dual variable of an optimization run (``()`` for gossip).
    """

    t: float
    x: tuple[float, ...]
    z: tuple[float, ...]
    edges: Mapping[int, int]
    y: tuple[float, ...] = ()


def consistent_cut(
    histories: Sequence[Sequence[Snapshot]],
    edges: NDArray[np.int64] | Sequence[tuple[int, int]],
    ids: Sequence[int] | None = None,
) -> list[int] | None:
    """Choose one report per node so that the choice is a consistent cut of the run.

    Reports are not simultaneous: if node w reports after serving an exchange with v and v
    reports before applying its half, summing the two counts the flow once on one side only,
    and the estimate shows a mass drift that never happened. Both ends count the exchanges
    they applied on each edge, so a choice of reports is consistent exactly when the two ends
    of every edge report the same count. Starting from every node's latest report, any node
    ahead of a neighbour on their edge is moved back to its latest report that is not ahead;
    indices only decrease, so this ends, at the latest consistent cut.

    Parameters
    ----------
    histories : sequence of sequences of Snapshot
        Every node's recent reports, oldest first.
    edges : ndarray of shape (n_edges, 2), or sequence of pairs
        The topology's edges, as pairs of node ids.
    ids : sequence of int, optional
        The node id of each history (default: its position). After churn the members' ids
        have gaps; an edge with an end that has no history (a departed node) is left out.

    Returns
    -------
    list of int or None
        The chosen index into each node's history, or ``None`` if the histories are too short
        to hold a consistent cut.
    """
    chosen = [len(h) - 1 for h in histories]
    if min(chosen, default=-1) < 0:
        return None
    # Every move is forced (any consistent cut below the current one has the moved node at
    # or before its new index), so the order of the checks does not change the result: a
    # worklist re-checks only the edges of a node that moved, instead of every edge until
    # nothing changes (this runs at every evaluation, with 64 reports per node).
    hist = [list(h) for h in histories]  # a deque's random access walks its blocks
    node_ids = list(range(len(hist))) if ids is None else [int(k) for k in ids]
    position = {node: i for i, node in enumerate(node_ids)}
    pairs = [
        (position[u], position[v])
        for u, v in ((int(u), int(v)) for u, v in np.asarray(edges).reshape(-1, 2).tolist())
        if u in position and v in position
    ]
    around: list[list[tuple[int, int]]] = [[] for _ in hist]
    for a, b in pairs:
        around[a].append((a, b))
        around[b].append((a, b))
    todo = list(pairs)
    while todo:
        a, b = todo.pop()
        ca = hist[a][chosen[a]].edges.get(node_ids[b], 0)
        cb = hist[b][chosen[b]].edges.get(node_ids[a], 0)
        if ca == cb:
            continue
        ahead, peer, limit = (a, node_ids[b], cb) if ca > cb else (b, node_ids[a], ca)
        reports, k = hist[ahead], chosen[ahead]
        while k >= 0 and reports[k].edges.get(peer, 0) > limit:
            k -= 1
        if k < 0:
            return None
        chosen[ahead] = k
        todo.extend(around[ahead])
    return chosen


def _floats(payload: Mapping[str, Any], key: str, dim: int | None) -> tuple[float, ...]:
    raw = payload.get(key)
    if isinstance(raw, str):  # a model's parameters, packed (gossip.wire.checks.pack)
        return tuple(unpacked(key, raw, dim).tolist())
    if not isinstance(raw, list) or not raw:
        raise ProtocolError(f"state report field {key!r} must be a non-empty list, got {raw!r}")
    out = []
    for item in raw:
        if isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
            raise ProtocolError(f"state report field {key!r} has a bad entry {item!r}")
        out.append(float(item))
    if dim is not None and len(out) != dim:
        raise ProtocolError(f"state report field {key!r} has {len(out)} components, expected {dim}")
    return tuple(out)


def _trace(raw: object, dim: int) -> list[tuple[float, tuple[float, ...]]]:
    # A report's trace (gossip.exchange.trace): [g, x_1, ..., x_dim] rows of finite numbers.
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ProtocolError(f"state report field 'trace' must be a list, got {raw!r}")
    out = []
    for i, row in enumerate(raw):
        if isinstance(row, list) and len(row) == 2 and isinstance(row[1], str):  # [g, packed x]
            g = row[0]
            if isinstance(g, bool) or not isinstance(g, int | float) or not math.isfinite(g):
                raise ProtocolError(f"state report field 'trace[{i}]' has a bad g {g!r}")
            out.append((float(g), tuple(unpacked(f"trace[{i}]", row[1], dim).tolist())))
            continue
        if (
            not isinstance(row, list)
            or len(row) != dim + 1
            or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                for v in row
            )
        ):
            raise ProtocolError(
                f"state report field 'trace[{i}]' must be [g, x_1..x_{dim}] of finite numbers, "
                f"got {row!r}"
            )
        out.append((float(row[0]), tuple(float(v) for v in row[1:])))
    return out


def _number(payload: Mapping[str, Any], key: str) -> float:
    raw = payload.get(key)
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise ProtocolError(f"state report field {key!r} must be a finite number, got {raw!r}")
    return float(raw)


def _optional(raw: Any) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        return None
    return float(raw)


def _count(raw: Any) -> int | None:
    """A count >= 0 of a report, or ``None`` when absent or malformed."""
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        return None
    return raw


def _clock(raw: Any) -> PeerClock | None:
    """A report's ``clock``: ``{"peer", "offset", "error", "samples"}`` (seconds), or ``None``
    when absent (an older node), null (nothing measured yet) or malformed: it only informs a
    warning, so a bad one is dropped, as the percentiles are, not the whole report."""
    if not isinstance(raw, dict):
        return None
    peer, samples = _natural(raw.get("peer")), _natural(raw.get("samples"))
    offset, error = _optional(raw.get("offset")), _optional(raw.get("error"))
    if peer is None or not samples or offset is None or error is None or error < 0:
        return None
    return PeerClock(peer=peer, offset=offset, error=error, samples=samples)


def _natural(raw: Any) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        return None
    return raw


def parse_report(
    topic: str, payload: bytes, topics: Topics, expected: int, dim: int | None
) -> dict[str, Any]:
    """Parse and check one message of a node's state topic (``topics.state(id)``, contract C3).

    Returns a dict with ``node`` (int), ``name``, ``address``, ``t``, ``wall``, ``x``, ``y``
    (``()`` unless an optimization run's node reports its dual), ``z``,
    ``initial`` (tuples), ``final`` (bool), ``counters`` (str -> int), ``rtt_p5_ms``,
    ``rtt_p50_ms``, ``rtt_p99_ms``, ``lag_p50``, ``lag_p99``, ``wait_p50``, ``wait_p99``
    (float or None: :mod:`gossip.exchange.lateness`),
    ``edges`` (int -> int), ``gradient_steps`` (int or None), ``trace`` (``(g, x)`` pairs,
    :mod:`gossip.exchange.trace`) and
    ``clock`` (a :class:`~coordinator.figures.records.PeerClock` or None: :func:`_clock`).

    Raises
    ------
    ProtocolError
        Not JSON, the topic's id and the payload's ``node`` differ, an id out of range, or a
        missing or non-finite field.
    """
    of_topic = topics.node_of(topic)
    if of_topic is None:
        raise ProtocolError(f"topic {topic!r} is not a node's state topic ({topics.states})")
    try:
        data = json.loads(payload)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"state report on {topic!r} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"state report on {topic!r} must be a JSON object")
    node = data.get("node")
    if isinstance(node, bool) or not isinstance(node, int) or node != of_topic:
        raise ProtocolError(f"state report on {topic!r} has node {node!r}, not the topic's id")
    if not 0 <= node < expected:
        raise ProtocolError(f"state report from node {node}: ids go from 0 to {expected - 1}")
    x = _floats(data, "x", dim)
    z = _floats(data, "z", len(x))
    # Optimization runs: x is the primal grad f^*(y), and the dual y is reported beside it.
    y = _floats(data, "y", len(x)) if "y" in data else ()
    initial = _floats(data, "initial", len(x))
    counters_raw = data.get("counters") or {}
    counters = {
        k: int(v)
        for k, v in (counters_raw.items() if isinstance(counters_raw, dict) else ())
        if isinstance(v, int) and not isinstance(v, bool)
    }
    rtt_raw = data.get("rtt_ms")
    rtt: dict[str, Any] = rtt_raw if isinstance(rtt_raw, dict) else {}
    lag_raw = data.get(
        "lag"
    )  # absent from the reports of nodes older than gossip.exchange.lateness
    lag: dict[str, Any] = lag_raw if isinstance(lag_raw, dict) else {}
    wait_raw = data.get("wait")  # absent from the reports of nodes older than tick-time jumps
    wait: dict[str, Any] = wait_raw if isinstance(wait_raw, dict) else {}
    edges_raw = data.get("edges") or {}
    edges: dict[int, int] = {}
    if isinstance(edges_raw, dict):
        for k, v in edges_raw.items():
            if str(k).isdigit() and isinstance(v, int) and not isinstance(v, bool):
                edges[int(k)] = v
    return {
        "node": node,
        "name": str(data.get("name", "")),
        "address": str(data.get("address", "")),
        "t": _number(data, "t"),
        "wall": _number(data, "wall"),
        "x": x,
        "y": y,
        "z": z,
        "initial": initial,
        "final": bool(data.get("final", False)),
        "counters": {name: counters.get(name, 0) for name in COUNTER_NAMES},
        "rtt_p5_ms": _optional(rtt.get("p5")),  # absent from older nodes: the p50 stands in
        "rtt_p50_ms": _optional(rtt.get("p50")),
        "rtt_p99_ms": _optional(rtt.get("p99")),
        "lag_p50": _optional(lag.get("p50")),
        "lag_p99": _optional(lag.get("p99")),
        "wait_p50": _optional(wait.get("p50")),
        "wait_p99": _optional(wait.get("p99")),
        "edges": edges,
        "gradient_steps": _count(data.get("gradient_steps")),  # absent from older nodes
        "first_exchange": _optional(data.get("first_exchange")),  # absent from older nodes
        "clock": _clock(data.get("clock")),  # absent from older nodes
        "trace": _trace(
            data.get("trace"), len(x)
        ),  # absent from nodes older than gossip.exchange.trace
    }


def update_view(view: NodeView, report: Mapping[str, Any], received: float) -> None:
    """Copy a parsed report into ``view`` (the node's entry in the cluster state)."""
    view.name = report["name"]
    view.address = report["address"]
    view.t = report["t"]
    view.wall = report["wall"]
    view.x = report["x"]
    view.z = report["z"]
    view.initial = report["initial"]
    view.final = report["final"]
    view.counters = dict(report["counters"])
    view.rtt_p5_ms = report["rtt_p5_ms"]
    view.rtt_p50_ms = report["rtt_p50_ms"]
    view.rtt_p99_ms = report["rtt_p99_ms"]
    view.lag_p50 = report["lag_p50"]
    view.lag_p99 = report["lag_p99"]
    view.wait_p50 = report["wait_p50"]
    view.wait_p99 = report["wait_p99"]
    view.edges = dict(report["edges"])
    view.gradient_steps = report.get("gradient_steps")
    first = report.get("first_exchange")
    if first is not None and (view.first_exchange is None or first < view.first_exchange):
        view.first_exchange = first  # the earliest: a restarted node's new one comes later
    view.clock = report["clock"]
    view.received = received
    view.reports += 1
