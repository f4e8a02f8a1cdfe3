"""Compact JSON rows and the header's figures for the page, from the coordinator's state.

The header's figures (:func:`headline`) are measured ones: the exact mass drift and, once the
run finished, the run summary's figures, the same as ``gossip up --json``; never a running
estimate shown as the run's result. A training run's header adds its own figures under the
``--json`` summary's names (:func:`training_headline`).

The page receives node rows as positional lists (see :data:`NODE_FIELDS`) rather than dicts: a
batch for 225 nodes is sent several times a second to every open tab, and repeating the field
names in every row would triple its size for nothing.
"""

from __future__ import annotations

import math
from typing import Any

from continuized.coordinator.figures.records import NodeView, RunSummary, exchange_start
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.figures.train_figures import training_figures, training_rates

__all__ = [
    "DRIFT_SOURCES",
    "NODE_FIELDS",
    "cluster_counters",
    "curve_points",
    "display_value",
    "exact_drift",
    "headline",
    "initial_error",
    "node_row",
    "run_summary_of",
    "stale_after",
    "task_of",
    "training_headline",
]

NODE_FIELDS = (
    "id",
    "name",
    "address",
    "value",
    "received",
    "wall",
    "t",
    "initiated",
    "served",
    "retried",
    "failed",
    "rejected",
    "rtt_p50_ms",
    "rtt_p99_ms",
    "final",
)
"""Meaning of each position in a row from :func:`node_row` (sent once to the page)."""


def stale_after(state: ClusterState) -> float:
    """Seconds without a report after which the page marks a node stale (before it is dead).

    Half the liveness timeout: late enough that ordinary jitter in the report period does not
    make rows blink, early enough to show a node in trouble before it is counted dead.
    """
    return state.alive_timeout / 2.0


def display_value(x: tuple[float, ...]) -> float | None:
    """Return the number shown for a node's value: ``x`` itself if scalar, ``|x|`` if a vector."""
    if not x:
        return None
    value = x[0] if len(x) == 1 else math.sqrt(sum(c * c for c in x))
    return value if math.isfinite(value) else None


def node_row(view: NodeView) -> list[Any]:
    """Return ``view`` as a positional row in the order of :data:`NODE_FIELDS`."""
    counters = view.counters
    return [
        view.node,
        view.name,
        view.address,
        _num(display_value(view.x)),
        _num(view.received),
        _num(view.wall),
        _num(view.t),
        int(counters.get("initiated", 0)),
        int(counters.get("served", 0)),
        int(counters.get("retried", 0)),
        int(counters.get("failed", 0)),
        int(counters.get("rejected", 0)),
        _num(view.rtt_p50_ms),
        _num(view.rtt_p99_ms),
        view.final,
    ]


def initial_error(initial: list[tuple[float, ...]]) -> float | None:
    """Return ``e0 = sum_v 1/2 |x_v(0) - mean|^2`` for the initial values, or None if unknown.

    Examples
    --------
    >>> initial_error([(1.0,), (0.0,)])
    0.25
    """
    if not initial:
        return None
    dim = len(initial[0])
    n = len(initial)
    mean = [sum(v[k] for v in initial) / n for k in range(dim)]
    return 0.5 * sum(sum((v[k] - mean[k]) ** 2 for k in range(dim)) for v in initial)


def cluster_counters(
    state: ClusterState, now: float, rate_achieved: float | None
) -> dict[str, Any]:
    """Return the cluster counters shown above the charts.

    ``rate_achieved`` (activations per second over the last few seconds) is measured by the
    dashboard's feed, which samples the activation count; the rest comes from ``state``.
    """
    stale = sum(
        1
        for view in state.nodes.values()
        if view.reports and not view.final and now - view.received > stale_after(state)
    )
    return {
        "phase": state.phase,
        "message": state.message,
        "nodes_alive": state.nodes_alive(now),
        "nodes_reported": len(state.nodes),
        "nodes_stale": stale,
        "registered": len(state.registered),
        "expected": state.expected,
        "activations": state.activations(),
        "rate_asked": state.rate,
        "rate_achieved": _num(rate_achieved),
        "broker": state.broker.as_dict(),
    }


DRIFT_SOURCES = ("final reports", "exact curve", "")
"""Where :func:`headline` took ``mass_drift_rel`` from (``""``: unknown so far)."""


def run_summary_of(state: ClusterState) -> RunSummary | None:
    """The run summary of the state's current run once it finished (what ``--json`` holds)."""
    for run in reversed(state.runs):
        if run.run_id == state.run_id:
            return run
    return None


def exact_drift(state: ClusterState) -> tuple[float | None, str]:
    """The run's exact mass drift and where it comes from (one of :data:`DRIFT_SOURCES`).

    The run summary's (from the final reports) once the run finished, else the exact curve's
    latest point (gossip runs, and optimization runs whose nodes trace their dual ``y``), else
    ``(None, "")``: unknown, as before the exact curve's first point.
    """
    run = run_summary_of(state) if state.phase in ("done", "failed") else None
    if run is not None:
        drift = _num(run.mass_drift_rel)
        return drift, DRIFT_SOURCES[0] if drift is not None else ""
    if state.exact:
        drift = _num(state.exact[-1].mass_drift_rel)
        return drift, DRIFT_SOURCES[1] if drift is not None else ""
    return None, ""


def curve_points(state: ClusterState) -> int:
    """Points of the run's own curve: the exact curve's, else (optimization runs, churn) the
    estimated one's. It is the ``exact curve points`` figure of ``gossip up``'s summary."""
    return (len(state.exact) + state.exact_dropped) or (len(state.history) + state.history_dropped)


def headline(state: ClusterState, now: float, rate_live: float | None) -> dict[str, Any]:
    """Return the figures the page's header shows: :meth:`ClusterState.summary`, made true.

    The state's summary follows the running estimate (reports mixed to a common t, missing the
    jumps in flight), which is what the coordinator watches but not what the run did. This
    replaces what a measured figure exists for:

    * ``mass_drift_rel``: :func:`exact_drift`; ``drift_source`` says where it comes from;
    * ``t``, ``error``: the final result's once the run finished (``final_t`` and
      ``final_error`` of ``--json``), else the latest estimate;
    * ``t_eps``, ``reached``, ``rate_achieved``, ``activations``: the run summary's once the
      run finished; while it runs, ``rate_achieved`` is ``rate_live`` (measured by the feed).

    It adds ``task`` (:func:`task_of`), ``finished``, ``stop_reason``, ``problem`` (``""``
    for averaging), ``points`` (:func:`curve_points`), ``nodes_final`` (nodes that sent their
    final report), ``rate_asked``, ``ready_after_s`` (seconds from the coordinator's start
    to the last node ready; ``None`` before), ``first_exchange_s`` and ``all_exchanged_s``
    (:func:`~coordinator.figures.records.exchange_start`); for a training run,
    :func:`training_headline`.
    The keys of contract C4 keep their meaning.
    """
    out = state.summary(now)
    run = run_summary_of(state) if state.phase in ("done", "failed") else None
    out["mass_drift_rel"], out["drift_source"] = exact_drift(state)
    out["task"] = task_of(state)
    out["finished"] = run is not None
    out["stop_reason"] = run.stop_reason if run is not None else ""
    out["problem"] = state.optimization.task.problem if state.optimization is not None else ""
    out["points"] = curve_points(state)
    out["nodes_final"] = sum(1 for view in state.nodes.values() if view.final)
    out["rate_asked"] = state.rate
    out["ready_after_s"] = state.ready_after_s
    members = [v for k, v in state.nodes.items() if k not in state.departed]
    out["first_exchange_s"], out["all_exchanged_s"] = exchange_start(members, state.epoch)
    out["rate_achieved"] = _num(rate_live) if state.phase == "running" else None
    out["activations"] = state.activations()
    if run is not None:
        out["t_eps"], out["reached"] = _num(run.t_eps), run.reached
        out["rate_achieved"] = _num(run.rate_achieved)
        out["activations"] = run.activations
        if run.final_error is not None:
            out["error"] = _num(run.final_error)
        if state.final is not None:
            out["t"] = _num(state.final.t)
    if state.training is not None:
        out |= training_headline(state, now, run, out["rate_achieved"])
    return out


def task_of(state: ClusterState) -> str:
    """What the run computes: ``averaging``, ``optimization`` or ``training``."""
    if state.training is not None:
        return "training"
    return "optimization" if state.optimization is not None else "averaging"


def training_headline(
    state: ClusterState, now: float, run: RunSummary | None, exchanges: float | None
) -> dict[str, Any]:
    """A training run's header figures, under the names of its ``--json`` summary.

    Once the run finished they are the summary's own (:func:`training_figures`: ``target``,
    ``t_target``, ``wall_s_target``, ``rate_per_node_asked`` and ``_achieved`` in gradient steps
    per node per second, ``rate_network_asked`` and ``_achieved`` in exchanges per second), and
    ``training`` is its ``training`` block (accuracy, loss, consensus, verdict). While the run
    goes on they are the same figures so far, ``rate_network_achieved`` being ``exchanges``
    (the feed's, over its last seconds). ``freshness`` says how old the figures are:
    ``point_age_s`` (seconds since the latest scored point), ``report_age_s`` (the oldest
    member's report still expected, ``None`` once every member sent its final one).
    """
    train = state.training
    assert train is not None  # only for training runs
    if run is not None:
        figures = training_figures(run, state, state.rate)
    else:
        t_target = _num(state.t_eps) if state.t_eps is not None else None
        wall = state.wall_eps_estimate
        figures = {
            "t_target": t_target,
            "wall_s_target": None if t_target is None else t_target / state.rate,
            "t_target_estimate": state.t_eps_estimate,
            "wall_s_target_estimate": (
                None if wall is None or state.epoch is None else wall - state.epoch
            ),
            "rate_per_node_asked": state.rate,
            "rate_network_achieved": exchanges,
        } | training_rates(state, state.rate)
    figures["rate_per_node_achieved"] = _num(figures["rate_per_node_achieved"])
    latest = train.points[-1] if train.points else None
    waiting = [
        now - view.received
        for k, view in state.nodes.items()
        if k not in state.departed and view.reports and not view.final
    ]
    figures["freshness"] = {
        "point_age_s": None if latest is None else _num(max(0.0, now - latest.wall)),
        "report_age_s": _num(max(waiting)) if waiting else None,
    }
    figures["training"] = train.summary()
    return figures


def _num(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)
