"""A training run's headline figures under their own names (pure).

A training run's target is an accuracy or an error, not ``eps``, and ``--rate`` counts gradient
steps per node per second, not activations: its ``--json`` summary, its run log and its
dashboard name the averaging run's figures after what they measure (:data:`TRAINING_KEYS`),
and add the target and the rates the averaging run has no use for (:func:`training_rates`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from continuized.coordinator.figures.records import NodeView, RunSummary
from continuized.coordinator.figures.state import ClusterState

__all__ = [
    "TRAINING_KEYS",
    "accuracy_not_reached",
    "last_accuracy",
    "steps_rate",
    "training_figures",
    "training_rates",
]

TRAINING_KEYS = {
    "t_eps": "t_target",
    "wall_s": "wall_s_target",
    "t_eps_estimate": "t_target_estimate",
    "wall_s_estimate": "wall_s_target_estimate",
    "rate_asked": "rate_per_node_asked",
    "rate_achieved": "rate_network_achieved",
}
"""A training run's names for the averaging run's figures (its ``--json`` and run log): its
target is an accuracy or an error, not ``eps``, and ``--rate`` counts gradient steps per node
per second, not activations. :func:`training_figures` gives them, with ``target`` (instead of
``eps``), ``rate_per_node_achieved`` and ``rate_network_asked``."""


def steps_rate(views: Iterable[NodeView], rate: float) -> float | None:
    """Gradient steps per node per second, from the nodes' counts at their reports' t.

    ``t = rate * seconds`` and a node's gradient clock ticks once per unit of t on average,
    so ``rate * sum(steps) / sum(t)`` (``None`` before any t has passed, or with no counts).

    Examples
    --------
    >>> steps_rate([NodeView(0, t=100.0, gradient_steps=98), NodeView(1, t=100.0,
    ...     gradient_steps=102)], 20.0)
    20.0
    """
    steps, elapsed = 0, 0.0
    for view in views:
        if view.gradient_steps is not None and view.t > 0:
            steps += view.gradient_steps
            elapsed += view.t
    return rate * steps / elapsed if elapsed > 0 else None


def training_rates(state: ClusterState, rate: float) -> dict[str, Any]:
    """``target``, ``rate_per_node_achieved`` and ``rate_network_asked`` of a training run.

    ``target``: ``{"accuracy": A}`` with ``--until-accuracy A``, else ``{"error": eps}`` (the
    sum of ``1/2 |x_v - mean of the initial models|^2``, the consensus when ``lr`` is 0).
    ``rate_per_node_*`` count gradient steps per node per second (:func:`steps_rate` over the
    members' latest reports), ``rate_network_*`` communications (exchanges) per second over the
    whole network: ``rate_network_asked = rate * n * rate_com / 2`` (0 for ``local``).
    """
    train = state.training
    assert train is not None  # only for training runs
    recipe = train.recipe
    n = state.expected or len(state.nodes)
    members = [v for k, v in state.nodes.items() if k not in state.departed]
    return {
        "target": {"accuracy": train.target} if train.target is not None else {"error": state.eps},
        "rate_per_node_achieved": steps_rate(members, rate),
        "rate_network_asked": rate * n * recipe.rate_com / 2 if recipe.communicates else 0.0,
    }


def training_figures(summary: RunSummary, state: ClusterState, rate: float) -> dict[str, Any]:
    """A finished training run's headline figures under their own names: the summary's
    figures renamed by :data:`TRAINING_KEYS`, and :func:`training_rates`."""
    record = summary.as_dict()
    out: dict[str, Any] = {new: record[old] for old, new in TRAINING_KEYS.items()}
    return out | training_rates(state, rate)


def accuracy_not_reached(state: ClusterState, timeout: float) -> str | None:
    """Why a training run with an accuracy target stopped at ``--timeout`` short of it, and
    the settings to change; ``None`` for any other run (its target is the error's eps)."""
    training = state.training
    if training is None or training.target is None:
        return None
    return (
        f"the accuracy did not reach {training.target:g} within --timeout {timeout:g} s (its "
        f"accuracy: {last_accuracy(state)}); try a longer --timeout, a higher --rate if this "
        "machine keeps up, or a lower --until-accuracy"
    )


def last_accuracy(state: ClusterState) -> str:
    """A training run's latest accuracy and its t, as messages give it (``unknown`` before
    any, or for a model without one)."""
    last = None if state.training is None else state.training.latest
    if last is None or math.isnan(last.accuracy):
        return "unknown"
    return f"{last.accuracy:.4g} at t = {last.t:.0f}"
