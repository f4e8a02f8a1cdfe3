"""The outcome of a stopped run: the exact final error and the run's headline figures (pure).

After the stop no exchange is in flight any more, so the nodes' final reports mixed to a common
t give the exact final error and mass drift (:func:`final_result`). :func:`run_summary` adds the
figures of the whole run (t_eps, activations, the achieved rate, round-trip times): t_eps is
the exact curve's, as the state holds it (:mod:`coordinator.run.convergence`).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from continuized.coordinator.figures.metrics import estimate
from continuized.coordinator.figures.records import (
    FinalResult,
    NodeView,
    RunSummary,
    exchange_start,
)
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.figures.train_figures import (
    TRAINING_KEYS,
    steps_rate,
    training_figures,
)
from continuized.coordinator.membership.plan import Plan
from continuized.coordinator.run.config import CoordinatorConfig
from continuized.gossip.exchange.lateness import keeps_up
from continuized.gossip.graph.topology import Topology
from continuized.gossip.wire.pubsub import redact_broker

__all__ = [
    "MAX_BACK",
    "TRAINING_KEYS",
    "final_result",
    "missing_finals",
    "node_shares",
    "pace_of",
    "rate_achieved",
    "run_summary",
    "steps_rate",
    "summary_record",
    "training_figures",
]

MAX_BACK = 4.0
"""Mixing back over ``2 eta tau <= 4`` amplifies rounding errors at most ``e^4`` times."""


def final_result(state: ClusterState, plan: Plan, t_stop: float | None) -> FinalResult | None:
    """The exact outcome from the nodes' latest reports (``None`` unless every node reported).

    ``t_stop`` is the common t of the stop command: the error is given there when the final
    states can be mixed back to it without amplifying rounding errors, else at the latest final
    report's t. The mass drift is always measured forward, at the latter.
    """
    present = _present(state, plan)
    everyone = max(plan.expected, len(state.initial))  # joined nodes included
    if len(present) != everyone - len(state.departed) or not state.initial:
        return None
    t = np.array([v.t for v in present], dtype=np.float64)
    x = np.array([v.x for v in present], dtype=np.float64)
    z = np.array([v.z for v in present], dtype=np.float64)
    initial = np.array([state.initial[v.node] for v in present], dtype=np.float64)
    eta = plan.params.eta if state.view is None else state.view.eta
    # Mixed forward to the latest final report: exact, and the mass is exact.
    est = estimate(t, x, z, initial, eta)
    # After the stop no node jumps any more, it only mixes its own pair: the error the run was
    # stopped at is that of the final states mixed back to the stop (long after it, x has
    # drifted to (x + z) / 2). Going back multiplies rounding errors by exp(2 eta tau), so only
    # over a short enough tau.
    if t_stop is not None:
        back = float(t.max()) - t_stop
        if 0.0 < 2.0 * eta * back <= MAX_BACK:
            at_stop = estimate(t, x, z, initial, eta, at=t_stop)
            est = dataclasses.replace(est, t=at_stop.t, error=at_stop.error, values=at_stop.values)
    return FinalResult(
        t=est.t,
        error=est.error,
        mass_drift_rel=est.mass_drift_rel,
        values=tuple(tuple(float(c) for c in row) for row in est.values),
        mean=tuple(float(c) for c in est.mean),
        complete=all(v.final for v in present),
    )


def node_shares(topology: Topology) -> list[float]:
    """Each node's share of the activations: the sum of ``P_e`` over its edges (they sum to 2,
    an activation counting at both its ends)."""
    shares = np.zeros(topology.n, dtype=np.float64)
    np.add.at(shares, topology.edges[:, 0], topology.probs)
    np.add.at(shares, topology.edges[:, 1], topology.probs)
    return [float(share) for share in shares]


def pace_of(views: Iterable[NodeView], shares: Sequence[float]) -> tuple[float, int]:
    """``(t, activations)`` of the nodes' latest reports taken together, for
    :func:`rate_achieved`.

    Each node counts its activations up to its own report's t, and the reports are not
    simultaneous: the t that goes with their sum is the one at which the model expects as many,
    half the sum of the report times weighted by ``shares`` (:func:`node_shares`). Pairing
    the sum with one common t instead (say a consistent cut's, which can lag the latest
    reports by a couple of report periods) overstates the rate by as much as that lag. Nodes
    beyond ``shares`` (joined since) are left out of both.
    """
    weighted, count = 0.0, 0
    for view in views:
        if 0 <= view.node < len(shares):
            weighted += shares[view.node] * max(view.t, 0.0)
            count += sum(view.edges.values())
    return 0.5 * weighted, count // 2


def rate_achieved(rate: float, pace: tuple[float, int]) -> float | None:
    """Activations per second completed, from ``pace = (t, activations)`` at one moment.

    ``t = rate * seconds``, so the cluster completed ``rate * activations / t`` activations per
    second; ``None`` (unknown, not 0) without a measurement: before any time has passed.

    Examples
    --------
    >>> rate_achieved(1000.0, (500.0, 250)), rate_achieved(1000.0, (0.0, 0))
    (500.0, None)
    """
    pace_t, pace_acts = pace
    return rate * pace_acts / pace_t if pace_t > 0 else None


def run_summary(
    state: ClusterState,
    plan: Plan,
    final: FinalResult | None,
    pace: tuple[float, int],
    reason: str,
    finals_wait_s: float | None = None,
) -> RunSummary:
    """The headline figures of the run that just stopped for ``reason``.

    ``pace`` is ``(t, activations)`` at the last fresh point before the stop, while every node
    was still initiating: the achieved rate is measured there (without such a point, the
    caller gives the final reports' counts). ``finals_wait_s`` is how long
    the coordinator waited for the final reports. A figure no report measured is ``None``
    (unknown), and the summary counts the nodes each kind of figure comes from.
    """
    present = _present(state, plan)
    everyone = max(plan.expected, len(state.initial))
    epoch = state.epoch or 0.0
    missing = missing_finals(state, plan)
    # Measured only on every member's final report: the others have exchanges in flight.
    measured = final if final is not None and final.complete and not missing else None
    p50 = [v.rtt_p50_ms for v in present if v.rtt_p50_ms is not None]
    p99 = [v.rtt_p99_ms for v in present if v.rtt_p99_ms is not None]
    lag50 = [v.lag_p50 for v in present if v.lag_p50 is not None]
    lag99 = [v.lag_p99 for v in present if v.lag_p99 is not None]
    lag_p50 = statistics.median(lag50) if lag50 else None
    wait50 = [v.wait_p50 for v in present if v.wait_p50 is not None]
    wait99 = [v.wait_p99 for v in present if v.wait_p99 is not None]
    wait_p50 = statistics.median(wait50) if wait50 else None
    first_exchange_s, all_exchanged_s = exchange_start(present, state.epoch)
    return RunSummary(
        run_id=state.run_id,
        reached=state.reached,
        t_eps=state.t_eps,
        # t runs at ``rate`` per second from the epoch (not wall_eps - epoch: Unix times lose
        # the last digits in the subtraction).
        wall_s=None if state.t_eps is None else state.t_eps / plan.rate,
        activations=state.activations(),
        rate_achieved=rate_achieved(plan.rate, pace),
        rate_asked=plan.rate,
        final_error=measured.error if measured is not None else None,
        mass_drift_rel=measured.mass_drift_rel if measured is not None else None,
        rtt_p50_ms=statistics.median(p50) if p50 else None,
        rtt_p99_ms=statistics.median(p99) if p99 else None,
        stop_reason=reason,
        lag_p50=lag_p50,
        lag_p99=statistics.median(lag99) if lag99 else None,
        wait_p50=wait_p50,
        wait_p99=statistics.median(wait99) if wait99 else None,
        # The backlog says whether the cluster kept up; older nodes report only the lag, which
        # was the same figure before jumps kept their ticks' times.
        kept_up=keeps_up(lag_p50 if wait_p50 is None else wait_p50, plan.expected),
        t_eps_estimate=state.t_eps_estimate,
        wall_s_estimate=(
            None if state.wall_eps_estimate is None else state.wall_eps_estimate - epoch
        ),
        exact_points=len(state.exact) + state.exact_dropped,
        exact_note=state.exact_note,
        missing_finals=missing,
        members=everyone - len(state.departed),
        reported=sum(1 for v in present if v.reports > 0),
        timed=len(wait50) if wait50 else len(lag50),
        finals_wait_s=finals_wait_s,
        ready_after_s=state.ready_after_s,
        first_exchange_s=first_exchange_s,
        all_exchanged_s=all_exchanged_s,
    )


def missing_finals(state: ClusterState, plan: Plan) -> tuple[str, ...]:
    """The names of the members (departed nodes are not) without a final report, by id.

    A member that never reported at all is missing too; a name unknown to the state is given
    as ``node-<id>``.
    """
    everyone = max(plan.expected, len(state.initial))
    names = {k: name for name, k in state.registered.items()}
    return tuple(
        names.get(k, f"node-{k}")
        for k in range(everyone)
        if k not in state.departed and not (k in state.nodes and state.nodes[k].final)
    )


def _present(state: ClusterState, plan: Plan) -> list[NodeView]:
    # The members only: the nodes that left are not part of the outcome.
    everyone = max(plan.expected, len(state.initial))
    ids = (k for k in range(everyone) if k not in state.departed)
    return [state.nodes[k] for k in ids if k in state.nodes]


def summary_record(
    config: CoordinatorConfig,
    plan: Plan,
    state: ClusterState,
    summary: RunSummary,
    final: FinalResult | None,
    reason: str,
) -> dict[str, Any]:
    """The run's summary as the ``--json`` file and the run log hold it: ``summary`` with the
    run's settings, ``failure`` when the broker was lost (also set as ``state.message``), and
    the membership, optimization and training blocks the run has. A training run's figures
    go by their own names (:data:`TRAINING_KEYS`, :func:`training_figures`)."""
    record: dict[str, Any] = {
        **summary.as_dict(),
        "final_t": final.t if final else None,
        "complete": final is not None and final.complete,
        "graph": config.graph,
        "algorithm": plan.params.algorithm.value,
        "nodes": plan.expected,
        "eps": config.until,
    }
    if reason == "broker-lost":
        # A restarted coordinator may carry out its predecessor's decision (no deadline).
        deadline = config.broker_deadline
        given = "its --broker-deadline" if deadline is None else f"--broker-deadline {deadline:g} s"
        record["failure"] = (
            f"lost the broker {redact_broker(config.broker)}: unreachable for over {given}"
        )
        state.message = record["failure"]
    if state.churn:
        record["membership"] = list(state.churn)
    if state.optimization is not None:
        record["algorithm"] = "acd"
        record["optimization"] = state.optimization.summary()
    if state.training is not None:
        for key in (*TRAINING_KEYS, "eps"):
            record.pop(key)
        record |= training_figures(summary, state, plan.rate)
        record["algorithm"] = state.training.recipe.algorithm
        record["training"] = state.training.summary()
    return record
