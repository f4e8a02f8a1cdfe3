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
as ``GET /api/summary`` (contract C4). The records it holds (node reports, error points, run
summaries) are in :mod:`coordinator.figures.records`.

Units: ``t`` is the shared continuized time (``t = rate * (now - epoch)``), never seconds; ``wall``
values are Unix times in seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from continuized.coordinator.figures.optimization import OptTracker
from continuized.coordinator.figures.records import (
    ErrorPoint,
    FinalResult,
    NodeView,
    RunSummary,
    json_num,
    json_nums,
)
from continuized.coordinator.figures.thinning import thin
from continuized.coordinator.figures.train_measure import TrainTracker
from continuized.gossip.exchange.membership import View
from continuized.gossip.graph.spectral import GraphQuantities
from continuized.gossip.graph.topology import Topology
from continuized.gossip.model.algorithms import GossipParams

__all__ = ["PHASES", "BrokerStatus", "ClusterState", "Phase"]

Phase = str
"""One of ``registering``, ``running``, ``stopping``, ``done``, ``failed``."""

PHASES = ("registering", "running", "stopping", "done", "failed")


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
    register_messages : tuple of int
        ``(lone, batches)``: the registrations the registration socket took up to the
        bootstrap, re-sends included: a node's own Register, and a host process's
        RegisterBatch (all its nodes in one message).
    ready_after_s : float or None
        Seconds from the coordinator's start to the bootstrap, when the last node was ready
        to take its first step (set up: :mod:`coordinator.membership.registry`); ``None``
        until then, and for a resumed run.
    initial : list of tuple of float
        Initial value of every node by id (empty until bootstrap).
    nodes : dict of int to NodeView
        Latest report of every node that has reported, by id.
    history : list of ErrorPoint
        The error against t, one point per evaluation, in order: estimates from reports of
        different times (:mod:`coordinator.figures.metrics`). Thinned past
        :data:`coordinator.figures.thinning.CURVE_LIMIT` points (:meth:`record`).
    exact : list of ErrorPoint
        The exact error at the grid times every node has passed, in order of t
        (:mod:`coordinator.figures.exact_curve`); empty for optimization runs and after churn.
        Thinned as :attr:`history` (:meth:`add_exact`).
    history_dropped, exact_dropped : int
        How many points thinning removed from each (followers count points ever appended:
        :func:`coordinator.figures.thinning.since`).
    runs : list of RunSummary
        Finished runs (normally one per coordinator; kept as a list for restarts).
    broker : BrokerStatus
        The MQTT connection.
    reached : bool
        Whether the error went below ``eps`` (:mod:`coordinator.run.convergence` decides).
    t_eps : float or None
        The exact curve's first crossing of ``eps``; ``None`` until reached, and when the run
        has no exact curve (then :attr:`exact_note` says why).
    wall_eps : float or None
        The Unix time at which the clocks passed ``t_eps`` (``epoch + t_eps / rate``).
    t_eps_estimate : float or None
        The t at which the estimates (:attr:`history`) confirmed ``eps``, if they did.
    wall_eps_estimate : float or None
        The Unix time at which the coordinator computed that estimate.
    exact_note : str
        Why the exact curve is missing or ends early (``""``: it covers the run).
    final : FinalResult or None
        The exact outcome after a clean stop.
    message : str
        A human-readable status line (the last notable event, or the failure).
    alive_timeout : float
        A node counts as alive if it reported within this many seconds.
    revision : int
        Bumped by every change; readers compare it to see whether anything changed.
    optimization : OptTracker or None
        An optimization run's task and figures (``None`` for gossip runs); the ``error`` of
        its history is then ``sum_v |x_v - x*|^2``.
    training : TrainTracker or None
        A training run's recipe and figures (accuracy, loss, consensus of the average model;
        ``None`` otherwise); the ``error`` of its history is the averaging one, ``sum_v 1/2
        |x_v - mean|^2`` of the parameters.
    departed : set of int
        Ids of the nodes that left (or were declared dead): the error and the final result
        are measured on the other members only, to the mean of their initial values.
    view : View or None
        The latest membership view (``None``: the bootstrap graph); its ``eta`` mixes the
        reports and its ``edges`` give their consistent cuts.
    churn : list of dict
        The membership events, in order (``kind``: leave, dead, refused; ``view``, ``t``,
        ``wall``, ``node``, ``name``, ``members``, ``detail``): the dashboard's timeline.
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
    register_messages: tuple[int, int] = (0, 0)
    ready_after_s: float | None = None
    initial: list[tuple[float, ...]] = field(default_factory=list)
    nodes: dict[int, NodeView] = field(default_factory=dict)
    history: list[ErrorPoint] = field(default_factory=list)
    exact: list[ErrorPoint] = field(default_factory=list)
    history_dropped: int = 0
    exact_dropped: int = 0
    runs: list[RunSummary] = field(default_factory=list)
    broker: BrokerStatus = field(default_factory=BrokerStatus)
    reached: bool = False
    t_eps: float | None = None
    wall_eps: float | None = None
    t_eps_estimate: float | None = None
    wall_eps_estimate: float | None = None
    exact_note: str = ""
    final: FinalResult | None = None
    message: str = ""
    alive_timeout: float = 3.0
    revision: int = 0
    optimization: OptTracker | None = None
    training: TrainTracker | None = None
    departed: set[int] = field(default_factory=set)
    view: View | None = None
    churn: list[dict[str, Any]] = field(default_factory=list)

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
        self.history_dropped += thin(self.history)
        if may_reach and not self.reached and point.error <= self.eps:
            self.reached = True
            self.t_eps = point.t
            self.wall_eps = point.wall
        self.touch()

    def add_exact(self, points: list[ErrorPoint]) -> None:
        """Append exact ``points`` (in order of t) to :attr:`exact`, thinning its old part."""
        if points:
            self.exact.extend(points)
            self.exact_dropped += thin(self.exact)
            self.touch()

    def mark_reached(self, t: float | None, wall: float | None) -> None:
        """Record that ``eps`` was reached at common time ``t`` (Unix time ``wall``; both
        ``None`` when unknown: the run has no exact curve)."""
        if not self.reached:
            self.reached = True
            self.t_eps = t
            self.wall_eps = wall
            self.touch()

    def mark_estimate(self, t: float, wall: float) -> None:
        """Record that the estimates confirmed ``eps`` at common time ``t`` (computed at Unix
        time ``wall``)."""
        if self.t_eps_estimate is None:
            self.t_eps_estimate, self.wall_eps_estimate = t, wall
            self.touch()

    def unreach(self) -> None:
        """Forget that ``eps`` was reached: the membership changed, so the target did too."""
        if self.reached or self.t_eps_estimate is not None:
            self.reached, self.t_eps, self.wall_eps = False, None, None
            self.t_eps_estimate = self.wall_eps_estimate = None
            self.touch()

    # -- derived values ------------------------------------------------------------------------

    @property
    def algorithm(self) -> str:
        """``arg``, ``rg`` or ``acd`` (``""`` before the parameters are known)."""
        if self.optimization is not None:
            return "acd"
        if self.training is not None:
            return self.training.recipe.algorithm
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
            "t": json_num(self.t),
            "error": json_num(err) if err is not None else None,
            "t_eps": json_num(self.t_eps),
            "mass_drift_rel": json_num(drift) if drift is not None else None,
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
            (list of ``[t, error, mass_drift_rel, wall]``), ``exact`` (the same, exact points),
            ``broker``, ``final`` (or ``None``),
            ``runs`` (list of run summaries).
        """
        now = time.time() if now is None else now
        history = self.history if history_limit is None else self.history[-history_limit:]
        exact = self.exact if history_limit is None else self.exact[-history_limit:]
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
            "epoch": json_num(self.epoch),
            "message": self.message,
            "revision": self.revision,
            "params": params,
            "quantities": self.quantities.as_dict() if self.quantities is not None else None,
            "topology": topo,
            "registered": dict(self.registered),
            "initial": [json_nums(v) for v in self.initial],
            "nodes": [self.nodes[k].as_dict(now, self.alive_timeout) for k in sorted(self.nodes)],
            "activations": self.activations(),
            "history": [p.as_list() for p in history],
            "exact": [p.as_list() for p in exact],
            "broker": self.broker.as_dict(),
            "final": self.final.as_dict() if self.final is not None else None,
            "runs": [r.as_dict() for r in self.runs],
            "optimization": (
                None if self.optimization is None else self.optimization.as_dict(history_limit)
            ),
            "training": (None if self.training is None else self.training.as_dict(history_limit)),
            "membership": {"departed": sorted(self.departed), "events": list(self.churn)},
        }
