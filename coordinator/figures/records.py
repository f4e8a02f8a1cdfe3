"""The records the coordinator keeps about a run: node reports, error points, the outcome.

Each record is a small dataclass with a JSON-ready view (``as_dict`` / ``as_list``: only
``str``, ``int``, ``float``, ``bool``, ``None``, lists and dicts). Non-finite floats are mapped
to ``None`` (:func:`json_num`) so that the result is valid JSON. They are assembled into the
whole cluster's view by :class:`~coordinator.figures.state.ClusterState`.

Units: ``t`` is the shared continuized time (``t = rate * (now - epoch)``), never seconds;
``wall`` values are Unix times in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "COUNTER_NAMES",
    "ErrorPoint",
    "FinalResult",
    "NodeView",
    "PeerClock",
    "RunSummary",
    "error_text",
    "exchange_start",
    "json_num",
    "json_nums",
    "missing_text",
]

COUNTER_NAMES = (
    "initiated",
    "served",
    "retried",
    "failed",
    "rejected",
    "duplicates",
    "skipped",
    "waited",
    "refused",
    "bounced",
    "deferred",
    "released",
    "forged",
    "postponed",
    "overdue",
    "crossed",
    "caught_up",
    "withdrawn",
)
"""The exchange counters every node reports (contract C3;
:class:`gossip.exchange.vocabulary.Counters` says what each counts): in the state snapshot, and as
``kind`` in ``/metrics``.

A node of an older version that does not report one of them counts as 0 for it."""


def json_num(value: float | None) -> float | None:
    """Return ``value`` as a JSON-safe float: ``None`` for NaN and infinities."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def error_text(value: float | None) -> str:
    """An error as every message and table shows it: ``4.274e-10``, or ``unknown`` when it
    was not measured (one figure, one spelling, wherever the terminal shows it)."""
    return "unknown" if value is None else format(value, ".3e")


def missing_text(missing: tuple[str, ...]) -> str:
    """`` (no final report from a, b): unknown`` for the phase message; ``""`` if none."""
    if not missing:
        return ""
    shown = ", ".join(missing[:8]) + (", ..." if len(missing) > 8 else "")
    return f" (no final report from {shown}): unknown"


def json_nums(values: tuple[float, ...] | list[float]) -> list[float | None]:
    """Return ``values`` as a JSON-safe list (see :func:`json_num`)."""
    return [json_num(v) for v in values]


@dataclass(frozen=True, slots=True)
class PeerClock:
    """A node's bound on one neighbour's clock offset, from their exchanges' round trips
    (:mod:`gossip.exchange.clockskew`): ``offset - error <= theta <= offset + error``.

    Attributes
    ----------
    peer : int
        The neighbour's node id.
    offset : float
        Seconds: the neighbour's clock less the node's, the bound's midpoint.
    error : float
        Seconds: the bound's half-width (at most half the shortest round trip seen).
    samples : int
        Exchanges behind the bound.
    """

    peer: int
    offset: float
    error: float
    samples: int

    def as_dict(self) -> dict[str, Any]:
        """Return the bound as the node reports it (JSON-ready)."""
        return {
            "peer": self.peer,
            "offset": json_num(self.offset),
            "error": json_num(self.error),
            "samples": self.samples,
        }


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
    rtt_p5_ms, rtt_p50_ms, rtt_p99_ms : float or None
        Round-trip time percentiles of the node's own exchanges, in milliseconds (the 5th
        percentile: ``None`` from nodes that do not report it).
    clock : PeerClock or None
        The node's bound on the neighbour's clock offset surely the largest; ``None`` before
        one is measured, and from nodes that do not report it.
    lag_p50, lag_p99 : float or None
        Percentiles of the lag of the node's jumps behind their ticks, in units of t
        (:mod:`gossip.exchange.lateness`).
    wait_p50, wait_p99 : float or None
        Percentiles of the wait of the node's exchanges' starts behind their ticks, in units
        of t: its backlog (:mod:`gossip.exchange.lateness`).
    edges : dict of int to int
        Activations so far on each of the node's edges, keyed by the peer's id.
    gradient_steps : int or None
        A training node's gradient steps so far; ``None`` from a node that does not train
        (or does not report them).
    first_exchange : float or None
        Unix time (the node's clock) of the first exchange it applied, as initiator or
        server, the earliest over its incarnations; ``None`` before one, and from nodes that
        do not report it.
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
    rtt_p5_ms: float | None = None
    rtt_p50_ms: float | None = None
    rtt_p99_ms: float | None = None
    clock: PeerClock | None = None
    lag_p50: float | None = None
    lag_p99: float | None = None
    wait_p50: float | None = None
    wait_p99: float | None = None
    edges: dict[int, int] = field(default_factory=dict)
    gradient_steps: int | None = None
    first_exchange: float | None = None
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
            "t": json_num(self.t),
            "wall": json_num(self.wall),
            "x": json_nums(self.x),
            "z": json_nums(self.z),
            "initial": json_nums(self.initial),
            "final": self.final,
            "counters": {k: int(v) for k, v in self.counters.items()},
            "rtt_ms": {
                "p5": json_num(self.rtt_p5_ms),
                "p50": json_num(self.rtt_p50_ms),
                "p99": json_num(self.rtt_p99_ms),
            },
            "clock": None if self.clock is None else self.clock.as_dict(),
            "lag": {"p50": json_num(self.lag_p50), "p99": json_num(self.lag_p99)},
            "wait": {"p50": json_num(self.wait_p50), "p99": json_num(self.wait_p99)},
            "edges": {str(k): int(v) for k, v in self.edges.items()},
            "first_exchange": json_num(self.first_exchange),
            "received": json_num(self.received),
            "reports": self.reports,
            "alive": self.alive(now, timeout),
            "age_s": json_num(now - self.received) if self.reports else None,
        }


def exchange_start(
    members: Sequence[NodeView], epoch: float | None
) -> tuple[float | None, float | None]:
    """Seconds from the epoch (t = 0) to the first exchange among ``members``, and to the last
    member's first exchange; each ``None`` while unknown (the second: until every member's
    report says one).

    Examples
    --------
    >>> a, b = NodeView(0, first_exchange=100.25), NodeView(1, first_exchange=100.5)
    >>> exchange_start([a, b], 100.0), exchange_start([a, NodeView(1)], 100.0)
    ((0.25, 0.5), (0.25, None))
    """
    firsts = [v.first_exchange for v in members if v.first_exchange is not None]
    if not epoch or not firsts:
        return None, None
    return min(firsts) - epoch, max(firsts) - epoch if len(firsts) == len(members) else None


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
        return [
            json_num(self.t),
            json_num(self.error),
            json_num(self.mass_drift_rel),
            json_num(self.wall),
        ]


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
            "t": json_num(self.t),
            "error": json_num(self.error),
            "mass_drift_rel": json_num(self.mass_drift_rel),
            "values": [json_nums(v) for v in self.values],
            "mean": json_nums(self.mean),
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
        Whether the error went below ``eps`` (:mod:`coordinator.run.convergence`).
    t_eps : float or None
        The exact curve's first crossing of ``eps`` (:mod:`coordinator.figures.exact_curve`);
        ``None`` if not reached, or unknown: the run had no exact curve (``exact_note`` says why).
    wall_s : float or None
        Seconds from the epoch (the nodes' start) to ``t_eps``: ``t_eps / rate``, when the
        clocks passed it; ``None`` with ``t_eps``.
    activations : int
        Edge activations completed by the whole network (each counted once).
    rate_achieved : float or None
        Activations per second actually completed: ``rate * activations / t`` at the last
        measurement before the stop (equal to ``rate_asked`` when the cluster keeps up);
        ``None`` (unknown) if the coordinator never had a measurement while the nodes ran.
    rate_asked : float
        The requested network-wide rate (activations per second).
    final_error, mass_drift_rel : float or None
        From :class:`FinalResult`, when every member sent its final report; ``None``
        (unknown) otherwise: a report that is not final leaves exchanges in flight, and the
        figures mixed from it are not measured ones.
    rtt_p50_ms, rtt_p99_ms : float or None
        Round-trip percentiles over the nodes (the medians of the nodes' p50s and p99s).
    stop_reason : str
        Why the coordinator stopped the nodes: ``reached``, ``timeout`` or ``diverged``.
    lag_p50, lag_p99 : float or None
        How late the jumps were behind their ticks, in units of t (:mod:`gossip.exchange.lateness`):
        the medians of the nodes' p50s and p99s.
    wait_p50, wait_p99 : float or None
        How long the exchanges waited to start behind their ticks, in units of t: the medians
        of the nodes' p50s and p99s (the backlog, :mod:`gossip.exchange.lateness`).
    kept_up : bool or None
        Whether ``wait_p50`` says the cluster kept up with its rate: a typical exchange started
        before the node's next activation was due (:func:`gossip.exchange.lateness.keeps_up`);
        ``None`` if no node reported it (``lag_p50`` then, from nodes that report no wait).
    t_eps_estimate : float or None
        The t at which the reports' estimates confirmed ``eps`` (:mod:`coordinator.figures.metrics`:
        biased upward at high rates); ``None`` if they had not when the run stopped.
    wall_s_estimate : float or None
        Seconds from the epoch to when the coordinator computed that estimate.
    exact_points : int
        Points of the run's exact curve.
    exact_note : str
        Why the exact curve is missing or ends early; ``""`` when it covers the run.
    missing_finals : tuple of str
        The names of the members whose final report never came (why ``final_error`` and
        ``mass_drift_rel`` are unknown); empty when every one came.
    members, reported, timed : int
        The members of the run, how many of them the coordinator had any report from, and
        how many of those had measured their round trips and waits (the percentiles above
        are the medians over these ``timed`` nodes only). ``activations`` counts what the
        ``reported`` nodes said: a lower bound when ``reported < members``.
    finals_wait_s : float or None
        Seconds from the stop command to the last final report taken (or to giving up);
        ``None`` for a run that never stopped its nodes.
    ready_after_s : float or None
        Seconds from the coordinator's start to the last node ready (registered and set up:
        the epoch is fixed then); ``None`` for a resumed run.
    first_exchange_s, all_exchanged_s : float or None
        Seconds from t = 0 (the epoch) to the first exchange in the network, and to the last
        member's first exchange, by the nodes' clocks; ``None`` while unknown (no report
        says one, or, for the second, some member's reports do not).
    """

    run_id: str
    reached: bool
    t_eps: float | None
    wall_s: float | None
    activations: int
    rate_achieved: float | None
    rate_asked: float
    final_error: float | None
    mass_drift_rel: float | None
    rtt_p50_ms: float | None
    rtt_p99_ms: float | None
    stop_reason: str = ""
    lag_p50: float | None = None
    lag_p99: float | None = None
    wait_p50: float | None = None
    wait_p99: float | None = None
    kept_up: bool | None = None
    t_eps_estimate: float | None = None
    wall_s_estimate: float | None = None
    exact_points: int = 0
    exact_note: str = ""
    missing_finals: tuple[str, ...] = ()
    members: int = 0
    reported: int = 0
    timed: int = 0
    finals_wait_s: float | None = None
    ready_after_s: float | None = None
    first_exchange_s: float | None = None
    all_exchanged_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the summary as a JSON-ready dict."""
        return {
            "run_id": self.run_id,
            "stop_reason": self.stop_reason,
            "reached": self.reached,
            "t_eps": json_num(self.t_eps),
            "wall_s": json_num(self.wall_s),
            "activations": self.activations,
            "rate_achieved": json_num(self.rate_achieved),
            "rate_asked": json_num(self.rate_asked),
            "final_error": json_num(self.final_error),
            "mass_drift_rel": json_num(self.mass_drift_rel),
            "rtt_p50_ms": json_num(self.rtt_p50_ms),
            "rtt_p99_ms": json_num(self.rtt_p99_ms),
            "lag_p50": json_num(self.lag_p50),
            "lag_p99": json_num(self.lag_p99),
            "wait_p50": json_num(self.wait_p50),
            "wait_p99": json_num(self.wait_p99),
            "kept_up": self.kept_up,
            "t_eps_estimate": json_num(self.t_eps_estimate),
            "wall_s_estimate": json_num(self.wall_s_estimate),
            "exact_points": self.exact_points,
            "exact_note": self.exact_note,
            "missing_finals": list(self.missing_finals),
            "members": self.members,
            "reported": self.reported,
            "timed": self.timed,
            "finals_wait_s": json_num(self.finals_wait_s),
            "ready_after_s": json_num(self.ready_after_s),
            "first_exchange_s": json_num(self.first_exchange_s),
            "all_exchanged_s": json_num(self.all_exchanged_s),
        }
