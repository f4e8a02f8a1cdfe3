"""The coordinator's view of a running cluster, as a plain in-process object.

Theory of operation
-------------------
The coordinator owns exactly one :class:`ClusterState`. Its tasks (registration, the MQTT
monitor) write into it; the dashboard (``coordinator.dashboard.serve``) and the ``gossip up``
progress bar only read it, from the same event loop, so no lock is needed: every update is a
plain assignment made between two ``await`` points.

Readers that want to know whether anything changed compare :attr:`ClusterState.revision`, a
counter bumped by every mutating method (:meth:`ClusterState.touch`).

:meth:`ClusterState.snapshot` turns the whole state into a JSON-ready ``dict`` (only ``str``,
``int``, ``float``, ``bool``, ``None``, lists and dicts). Non-finite floats are mapped to
``None`` so that the result is valid JSON. :meth:`ClusterState.summary` is the small dict served
as ``GET /api/summary`` (contract C4).

Units: ``t`` is the shared continuized time (``t = rate * (now - epoch)``), never seconds; ``wall``
values are Unix times in seconds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from gossip.params import GossipParams
from gossip.spectral import GraphQuantities
from gossip.topology import Topology

__all__ = [
    "COUNTER_NAMES",
    "BrokerStatus",
    "ClusterState",
    "ErrorPoint",
    "FinalResult",
    "NodeView",
    "Phase",
    "RunSummary",
]

COUNTER_NAMES = (
    "initiated",
    "served",
    "retried",
    "failed",
    "rejected",
    "duplicates",
    "skipped",
    "corrections",
    "corrected",
    "late",
    "forged",
)
"""The exchange counters every node reports (contract C3; corrections, corrected and late in
exact mode only; forged: frames whose ``src`` was not the node authenticated by their key).

A node of an older version that does not report one of them counts as 0 for it."""

Phase = str
"""One of ``registering``, ``running``, ``stopping``, ``done``, ``failed``."""

PHASES = ("registering", "running", "stopping", "done", "failed")


def _num(value: float | None) -> float | None:
    """Return ``value`` as a JSON-safe float: ``None`` for NaN and infinities."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _nums(values: tuple[float, ...] | list[float]) -> list[float | None]:
    return [_num(v) for v in values]


@dataclass(slots=True)
class NodeView:
    """The latest state report of one node, as published on ``gossip/<cluster>/node/<id>/state``.

    Attributes
    ----------
    node : int
        Node id assigned at registration (``0..n-1``, the topology's node).
    name : str
        The name the node registered with (unique in the cluster).
    address : str
        The node's ZeroMQ address for exchanges, e.g. ``tcp://127.0.0.1:40123``.
    t : float
        The node's continuized time when it took the snapshot.
    wall : float
        Unix time (seconds) at which the node took the snapshot.
    x, z : tuple of float
        The node's two values at ``t`` (one component per dimension; ``z == x`` for RG).
    initial : tuple of float
        The node's initial value.
    final : bool
        True for the last report a node sends when it stops.
    counters : dict of str to int
        Exchange counters: ``initiated``, ``served``, ``retried``, ``failed``, ``rejected``,
        ``duplicates``.
    rtt_p50_ms, rtt_p99_ms : float or None
        Round-trip time percentiles of the node's own exchanges, in milliseconds.
    edges : dict of int to int
        Activations so far on each of the node's edges, keyed by the peer's id.
    received : float
        Unix time at which the coordinator received this report (its own clock).
    reports : int
        How many reports the coordinator has received from this node.
    """

    node: int
    name: str = ""
    address: str = ""
    t: float = 0.0
    wall: float = 0.0
    x: tuple[float, ...] = ()
    z: tuple[float, ...] = ()
    initial: tuple[float, ...] = ()
    final: bool = False
    counters: dict[str, int] = field(default_factory=dict)
    rtt_p50_ms: float | None = None
    rtt_p99_ms: float | None = None
    edges: dict[int, int] = field(default_factory=dict)
    received: float = 0.0
    reports: int = 0

    def alive(self, now: float, timeout: float) -> bool:
        """True if the node reported within ``timeout`` seconds of ``now`` and has not stopped."""
        return self.reports > 0 and not self.final and now - self.received <= timeout

    def as_dict(self, now: float, timeout: float) -> dict[str, Any]:
        """Return the view as a JSON-ready dict, with ``alive`` and ``age_s`` as of ``now``."""
        return {
            "node": self.node,
            "name": self.name,
            "address": self.address,
            "t": _num(self.t),
            "wall": _num(self.wall),
            "x": _nums(self.x),
            "z": _nums(self.z),
            "initial": _nums(self.initial),
            "final": self.final,
            "counters": {k: int(v) for k, v in self.counters.items()},
            "rtt_ms": {"p50": _num(self.rtt_p50_ms), "p99": _num(self.rtt_p99_ms)},
            "edges": {str(k): int(v) for k, v in self.edges.items()},
            "received": _num(self.received),
            "reports": self.reports,
            "alive": self.alive(now, timeout),
            "age_s": _num(now - self.received) if self.reports else None,
        }


@dataclass(frozen=True, slots=True)
class ErrorPoint:
    """One point of the error history: the network state estimated at a common time ``t``.

    Attributes
    ----------
    t : float
        The common continuized time every node's last report was mixed to.
    error : float
        ``sum_v 1/2 |x_v(t) - mean|^2`` against the true mean of the initial values.
    mass_drift_rel : float
        ``|sum_v x_v(t) - sum_v x_v(0)| / sum_v |x_v(0)|``. While exchanges are in flight this is
        only an estimate (reports are not simultaneous); after a clean stop it is exact.
    wall : float
        Unix time (seconds) at which the coordinator computed the point.
    """

    t: float
    error: float
    mass_drift_rel: float
    wall: float

    def as_list(self) -> list[float | None]:
        """Return ``[t, error, mass_drift_rel, wall]`` (JSON-safe)."""
        return [_num(self.t), _num(self.error), _num(self.mass_drift_rel), _num(self.wall)]


@dataclass(slots=True)
class BrokerStatus:
    """The coordinator's connection to the MQTT broker.

    Attributes
    ----------
    url : str
        ``mqtt://host:port`` of the broker (``""`` when the run has none).
    kind : str
        ``external``, ``mosquitto`` (a process started by ``gossip up``) or ``amqtt`` (in-process).
    connected : bool
        Whether the monitor is currently connected.
    reconnects : int
        How many times the connection was lost and re-established.
    last_error : str
        The last connection error, ``""`` if none.
    """

    url: str = ""
    kind: str = "external"
    connected: bool = False
    reconnects: int = 0
    last_error: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Return the status as a JSON-ready dict."""
        return {
            "url": self.url,
            "kind": self.kind,
            "connected": self.connected,
            "reconnects": self.reconnects,
            "last_error": self.last_error,
        }


@dataclass(frozen=True, slots=True)
class FinalResult:
    """The exact outcome of a run, from the nodes' final reports mixed to a common ``t``.

    Attributes
    ----------
    t : float
        The common time of ``error`` and ``values``: the moment of the stop command when the
        final states can be mixed back to it without amplifying rounding errors, else the
        latest final report's t. ``mass_drift_rel`` is always measured forward, at the latter.
    error : float
        ``sum_v 1/2 |x_v(t) - mean|^2`` at ``t``.
    mass_drift_rel : float
        ``|sum_v x_v(t) - sum_v x_v(0)| / sum_v |x_v(0)|``.
    values : tuple of tuple of float
        ``x_v(t)`` for every node, by id.
    mean : tuple of float
        The true mean of the initial values.
    complete : bool
        True if every expected node sent a final report; otherwise the missing nodes' last
        ordinary reports were used.
    """

    t: float
    error: float
    mass_drift_rel: float
    values: tuple[tuple[float, ...], ...]
    mean: tuple[float, ...]
    complete: bool

    def as_dict(self) -> dict[str, Any]:
        """Return the result as a JSON-ready dict."""
        return {
            "t": _num(self.t),
            "error": _num(self.error),
            "mass_drift_rel": _num(self.mass_drift_rel),
            "values": [_nums(v) for v in self.values],
            "mean": _nums(self.mean),
            "complete": self.complete,
        }


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The headline figures of a finished run (what ``gossip up --json`` writes).

    Attributes
    ----------
    run_id : str
        Identifier of the run (chosen by the coordinator at bootstrap).
    reached : bool
        Whether the error went below ``eps``.
    t_eps : float or None
        The common t at which it did.
    wall_s : float or None
        Seconds from the epoch (the nodes' start) to reaching ``eps``; ``None`` if not reached.
    activations : int
        Edge activations completed by the whole network (each counted once).
    rate_achieved : float
        Activations per second actually completed: ``rate * activations / t`` at the last
        measurement before the stop (equal to ``rate_asked`` when the cluster keeps up).
    rate_asked : float
        The requested network-wide rate (activations per second).
    final_error, mass_drift_rel : float or None
        From :class:`FinalResult`.
    rtt_p50_ms, rtt_p99_ms : float or None
        Round-trip percentiles over the nodes (the medians of the nodes' p50s and p99s).
    stop_reason : str
        Why the coordinator stopped the nodes: ``reached``, ``timeout`` or ``diverged``.
    """

    run_id: str
    reached: bool
    t_eps: float | None
    wall_s: float | None
    activations: int
    rate_achieved: float
    rate_asked: float
    final_error: float | None
    mass_drift_rel: float | None
    rtt_p50_ms: float | None
    rtt_p99_ms: float | None
    stop_reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Return the summary as a JSON-ready dict."""
        return {
            "run_id": self.run_id,
            "stop_reason": self.stop_reason,
            "reached": self.reached,
            "t_eps": _num(self.t_eps),
            "wall_s": _num(self.wall_s),
            "activations": self.activations,
            "rate_achieved": _num(self.rate_achieved),
            "rate_asked": _num(self.rate_asked),
            "final_error": _num(self.final_error),
            "mass_drift_rel": _num(self.mass_drift_rel),
            "rtt_p50_ms": _num(self.rtt_p50_ms),
            "rtt_p99_ms": _num(self.rtt_p99_ms),
        }


@dataclass(slots=True)
class ClusterState:
    """Everything the coordinator knows about the cluster; the dashboard serves it.

    Attributes
    ----------
    graph : str
        Topology spec, e.g. ``grid:4x4``.
    cluster : str
        Cluster name: the MQTT topics are under ``gossip/<cluster>/``.
    expected : int
        Number of nodes the coordinator waits for (the topology's node count).
    eps : float
        Target error: the run has converged when the error is ``<= eps``.
    rate : float
        Network-wide activations per second (``t = rate * (now - epoch)``).
    run_id : str
        Identifier of the current run; ``""`` until bootstrap.
    topology : Topology or None
        The graph with its edge probabilities (known from the start).
    quantities : GraphQuantities or None
        ``mu_gossip``, ``R_max``, ...
    params : GossipParams or None
        ``algorithm``, ``eta``, ``c``, ``theta``.
    epoch : float or None
        Unix time of ``t = 0``; ``None`` until bootstrap.
    phase : str
        ``registering``, ``running``, ``stopping``, ``done`` or ``failed``.
    registered : dict of str to int
        Node name -> assigned id, for every node that has registered so far.
    initial : list of tuple of float
        Initial value of every node by id (empty until bootstrap).
    nodes : dict of int to NodeView
        Latest report of every node that has reported, by id.
    history : list of ErrorPoint
        The error against t, one point per evaluation, in order.
    runs : list of RunSummary
        Finished runs (normally one per coordinator; kept as a list for restarts).
    broker : BrokerStatus
        The MQTT connection.
    reached : bool
        Whether the error went below ``eps``.
    t_eps : float or None
        The common t at which it first did.
    wall_eps : float or None
        The Unix time at which it first did.
    final : FinalResult or None
        The exact outcome after a clean stop.
    message : str
        A human-readable status line (the last notable event, or the failure).
    alive_timeout : float
        A node counts as alive if it reported within this many seconds.
    revision : int
        Bumped by every change; readers compare it to see whether anything changed.
    """

    graph: str
    cluster: str = "gossip"
    expected: int = 0
    eps: float = 1e-6
    rate: float = 0.0
    run_id: str = ""
    topology: Topology | None = None
    quantities: GraphQuantities | None = None
    params: GossipParams | None = None
    epoch: float | None = None
    phase: Phase = "registering"
    registered: dict[str, int] = field(default_factory=dict)
    initial: list[tuple[float, ...]] = field(default_factory=list)
    nodes: dict[int, NodeView] = field(default_factory=dict)
    history: list[ErrorPoint] = field(default_factory=list)
    runs: list[RunSummary] = field(default_factory=list)
    broker: BrokerStatus = field(default_factory=BrokerStatus)
    reached: bool = False
    t_eps: float | None = None
    wall_eps: float | None = None
    final: FinalResult | None = None
    message: str = ""
    alive_timeout: float = 3.0
    revision: int = 0

    # -- updates -------------------------------------------------------------------------------

    def touch(self) -> None:
        """Record that something changed (bump :attr:`revision`)."""
        self.revision += 1

    def set_phase(self, phase: Phase, message: str = "") -> None:
        """Move to ``phase`` (one of :data:`PHASES`) with an optional status message."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; valid: {', '.join(PHASES)}")
        self.phase = phase
        if message:
            self.message = message
        self.touch()

    def record(self, point: ErrorPoint, may_reach: bool = True) -> None:
        """Append ``point`` to the history and note when ``eps`` is first reached.

        ``may_reach=False`` records the point without letting it count as reaching ``eps`` (the
        coordinator passes it when some node's report is stale, so the estimate is unreliable).
        """
        self.history.append(point)
        if may_reach and not self.reached and point.error <= self.eps:
            self.reached = True
            self.t_eps = point.t
            self.wall_eps = point.wall
        self.touch()

    def mark_reached(self, t: float, wall: float) -> None:
        """Record that ``eps`` was reached at common time ``t`` (Unix time ``wall``)."""
        if not self.reached:
            self.reached = True
            self.t_eps = t
            self.wall_eps = wall
            self.touch()

    # -- derived values ------------------------------------------------------------------------

    @property
    def algorithm(self) -> str:
        """``arg`` or ``rg`` (``""`` before the parameters are known)."""
        return self.params.algorithm.value if self.params is not None else ""

    @property
    def t(self) -> float:
        """The common t of the latest history point (0 before the first)."""
        return self.history[-1].t if self.history else 0.0

    @property
    def error(self) -> float | None:
        """The latest error estimate, or ``None`` before the first."""
        return self.history[-1].error if self.history else None

    @property
    def mass_drift_rel(self) -> float | None:
        """The latest relative mass drift, or ``None`` before the first."""
        return self.history[-1].mass_drift_rel if self.history else None

    def nodes_alive(self, now: float | None = None) -> int:
        """Number of nodes that reported within :attr:`alive_timeout` seconds of ``now``."""
        now = time.time() if now is None else now
        return sum(view.alive(now, self.alive_timeout) for view in self.nodes.values())

    def activations(self) -> int:
        """Edge activations completed so far, each counted once (half the sum over both ends)."""
        total = sum(sum(view.edges.values()) for view in self.nodes.values())
        return total // 2

    def edge_activations(self) -> dict[tuple[int, int], int]:
        """Activations per edge ``(u, v)`` with ``u < v``: the larger of the two ends' counts.

        The two ends of an edge count the same exchanges; reports are not simultaneous, so the
        more recent (larger) count is the better one.
        """
        counts: dict[tuple[int, int], int] = {}
        for view in self.nodes.values():
            for peer, count in view.edges.items():
                key = (min(view.node, peer), max(view.node, peer))
                counts[key] = max(counts.get(key, 0), int(count))
        return counts

    # -- JSON views ----------------------------------------------------------------------------

    def summary(self, now: float | None = None) -> dict[str, Any]:
        """Return the ``GET /api/summary`` dict (contract C4).

        Keys: ``reached``, ``t``, ``error``, ``t_eps``, ``mass_drift_rel``, ``nodes_alive``,
        ``expected``, ``algorithm``, ``graph``; plus ``phase`` and ``run_id``.
        """
        err = self.error
        drift = self.mass_drift_rel
        return {
            "reached": self.reached,
            "t": _num(self.t),
            "error": _num(err) if err is not None else None,
            "t_eps": _num(self.t_eps),
            "mass_drift_rel": _num(drift) if drift is not None else None,
            "nodes_alive": self.nodes_alive(now),
            "expected": self.expected,
            "algorithm": self.algorithm,
            "graph": self.graph,
            "phase": self.phase,
            "run_id": self.run_id,
        }

    def snapshot(
        self, now: float | None = None, history_limit: int | None = None
    ) -> dict[str, Any]:
        """Return the whole state as a JSON-ready dict.

        Parameters
        ----------
        now : float, optional
            Unix time used for node liveness (default: the current time).
        history_limit : int, optional
            Keep only the last ``history_limit`` history points (default: all).

        Returns
        -------
        dict
            ``summary`` (as :meth:`summary`), ``cluster``, ``eps``, ``rate``, ``epoch``,
            ``message``, ``revision``, ``params`` (``algorithm``, ``eta``, ``c``, ``theta``),
            ``quantities`` (``n``, ``n_edges``, ``mu_gossip``, ``r_max``, ...), ``topology``
            (``n``, ``edges`` as ``[u, v]`` pairs, ``probs``, ``activations`` per edge),
            ``registered`` (name -> id), ``nodes`` (list of node views, by id), ``history``
            (list of ``[t, error, mass_drift_rel, wall]``), ``broker``, ``final`` (or ``None``),
            ``runs`` (list of run summaries).
        """
        now = time.time() if now is None else now
        history = self.history if history_limit is None else self.history[-history_limit:]
        topo: dict[str, Any] | None = None
        if self.topology is not None:
            per_edge = self.edge_activations()
            topo = {
                "spec": self.topology.spec,
                "n": self.topology.n,
                "edges": [[int(u), int(v)] for u, v in self.topology.edges],
                "probs": [float(p) for p in self.topology.probs],
                "activations": [per_edge.get((int(u), int(v)), 0) for u, v in self.topology.edges],
            }
        params: dict[str, Any] | None = None
        if self.params is not None:
            params = {
                "algorithm": self.params.algorithm.value,
                "eta": self.params.eta,
                "c": self.params.c,
                "theta": self.params.theta,
                "bound_factor": self.params.bound_factor,
            }
        return {
            "summary": self.summary(now),
            "cluster": self.cluster,
            "eps": self.eps,
            "rate": self.rate,
            "epoch": _num(self.epoch),
            "message": self.message,
            "revision": self.revision,
            "params": params,
            "quantities": self.quantities.as_dict() if self.quantities is not None else None,
            "topology": topo,
            "registered": dict(self.registered),
            "initial": [_nums(v) for v in self.initial],
            "nodes": [self.nodes[k].as_dict(now, self.alive_timeout) for k in sorted(self.nodes)],
            "activations": self.activations(),
            "history": [p.as_list() for p in history],
            "broker": self.broker.as_dict(),
            "final": self.final.as_dict() if self.final is not None else None,
            "runs": [r.as_dict() for r in self.runs],
        }
