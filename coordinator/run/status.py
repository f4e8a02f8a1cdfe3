"""The coordinator's retained status message: what it publishes, and when a run can be resumed.

The status (``gossip/<cluster>/status``, retained by the broker) tells late nodes and a
restarted coordinator which run is going on: its header (:func:`run_header`: ids, graph,
algorithm and its parameters, rate, epoch), its phase, its assignment and, once finished, its
summary (:func:`status_record`). A coordinator started with the same graph, algorithm, rate and
node count adopts a run whose status is still running (:func:`resumable`), with its
membership (:func:`membership_record`: the latest view, who departed, who joined, with their
initial values), so that it measures the members of the run, not those of its bootstrap, and
its progress (:func:`progress_record`: eps reached and when, the stop decision), so that a run
that was stopping when its coordinator died is stopped, not run on.
"""

from __future__ import annotations

import os
import time
from typing import Any

from continuized.coordinator.figures.records import RunSummary
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.membership.plan import Assignment, Plan
from continuized.coordinator.run.config import CoordinatorConfig
from continuized.gossip.errors import GossipError, ProtocolError
from continuized.gossip.exchange.membership import view_from_dict
from continuized.gossip.wire.pubsub import redact_broker

__all__ = [
    "membership_record",
    "progress_record",
    "restore_membership",
    "restore_progress",
    "resumable",
    "run_header",
    "status_record",
]


def run_header(config: CoordinatorConfig, plan: Plan, state: ClusterState) -> dict[str, Any]:
    """The fixed facts of the run: the first record of the metrics file and of the status."""
    p = plan.params
    return {
        "run_id": state.run_id,
        "graph": config.graph,
        "cluster": config.cluster,
        "algorithm": p.algorithm.value,
        "params": {"eta": p.eta, "c": p.c, "theta": p.theta},
        "quantities": state.quantities.as_dict() if state.quantities else None,
        "expected": plan.expected,
        "rate": plan.rate,
        "eps": config.until,
        "epoch": state.epoch,
    }


def status_record(
    config: CoordinatorConfig,
    plan: Plan,
    state: ClusterState,
    assignment: Assignment | None,
    summary: RunSummary | None = None,
    churn: dict[str, Any] | None = None,
    stop_reason: str = "",
) -> dict[str, Any]:
    """The status message as of now (JSON-ready; the broker URL without its password).

    ``churn`` is the roster's own part of the membership
    (:meth:`coordinator.run.roster.Churn.record`); ``stop_reason`` the stop decision, once taken.
    """
    return {
        **run_header(config, plan, state),
        "phase": state.phase,
        "metrics_period": plan.metrics_period,
        "broker": redact_broker(config.broker),
        "bind": config.bind,
        "coordinator_pid": os.getpid(),
        "wall": time.time(),
        "assignment": assignment.as_dict() if assignment is not None else None,
        "summary": summary.as_dict() if summary is not None else None,
        "membership": {**membership_record(state), **(churn or {})},
        "progress": progress_record(state, stop_reason),
    }


def progress_record(state: ClusterState, stop_reason: str = "") -> dict[str, Any]:
    """How far the run got: eps reached (exact curve and estimate, t and wall time) and the stop
    decision (``stop``: its reason, ``""`` before it is taken)."""
    return {
        "reached": state.reached,
        "t_eps": state.t_eps,
        "wall_eps": state.wall_eps,
        "t_eps_estimate": state.t_eps_estimate,
        "wall_eps_estimate": state.wall_eps_estimate,
        "stop": stop_reason,
    }


def restore_progress(state: ClusterState, record: Any) -> str:
    """Put :func:`progress_record`'s ``record`` back into ``state``; return the stop decision's
    reason (``""``: none was taken; a record from an older coordinator has none)."""
    if not isinstance(record, dict):
        return ""

    def number(key: str) -> float | None:
        value = record.get(key)
        return float(value) if isinstance(value, int | float) else None

    if record.get("reached") is True:
        state.mark_reached(number("t_eps"), number("wall_eps"))
    t_estimate, wall_estimate = number("t_eps_estimate"), number("wall_eps_estimate")
    if t_estimate is not None and wall_estimate is not None:
        state.mark_estimate(t_estimate, wall_estimate)
    stop = record.get("stop")
    return stop if isinstance(stop, str) else ""


def membership_record(state: ClusterState) -> dict[str, Any]:
    """What a restarted coordinator needs to measure the right members: the latest view, the
    departed ids, every initial value (joined nodes' included), the joined names and the
    events. Kept in the retained status, so that it survives the coordinator."""
    return {
        "view": state.view.as_dict() if state.view is not None else None,
        "departed": sorted(state.departed),
        "initial": [list(value) for value in state.initial],
        "registered": dict(state.registered),
        "events": list(state.churn),
    }


def restore_membership(state: ClusterState, record: Any) -> None:
    """Put :func:`membership_record`'s ``record`` back into ``state`` (a resumed run).

    A record from an older coordinator (``None``, no view) leaves the bootstrap membership.

    Raises
    ------
    ProtocolError
        A record that is not the shape :func:`membership_record` writes.
    """
    if not isinstance(record, dict):
        return
    try:
        if record.get("view") is not None:
            state.view = view_from_dict(record["view"])
        state.departed = {int(k) for k in record.get("departed", [])}
        initial = record.get("initial")
        if isinstance(initial, list) and len(initial) >= len(state.initial):
            state.initial = [tuple(float(c) for c in value) for value in initial]
        registered = record.get("registered")
        if isinstance(registered, dict):
            state.registered = {str(name): int(k) for name, k in registered.items()}
        state.churn = [dict(e) for e in record.get("events", []) if isinstance(e, dict)]
    except (TypeError, ValueError, KeyError, GossipError) as exc:
        raise ProtocolError(f"the retained status's membership is malformed: {exc}") from exc


def resumable(status: Any, config: CoordinatorConfig, plan: Plan) -> bool:
    """True if the retained ``status`` is a running run this coordinator may adopt."""
    if not isinstance(status, dict):
        return False
    return (
        status.get("phase") in ("running", "stopping")
        and status.get("graph") == config.graph
        and status.get("algorithm") == plan.params.algorithm.value
        and status.get("rate") == plan.rate
        and status.get("expected") == plan.expected
        and isinstance(status.get("assignment"), dict)
    )
