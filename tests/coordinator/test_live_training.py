"""Decentralized training on the live cluster: real node processes, a real broker.

Each node cuts its own shard of digits, builds the MLP (d = 4810), takes gradient steps on its
own clock and exchanges its parameters as raw buffers (gossip.wire.schema); A²CiD²'s jumps and
mixing are the exchange's, with its constants.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from coordinator.broker import RunningBroker
from coordinator.launcher import UpConfig, run_up
from coordinator.records import RunSummary
from coordinator.service import CoordinatorConfig
from coordinator.state import ClusterState
from gossip.train.recipe import Recipe

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(300)]


async def _up(
    tmp_path: Path, recipe: Recipe, until: float, broker: str | None = None
) -> tuple[RunSummary, ClusterState]:
    config = UpConfig(
        coordinator=CoordinatorConfig(
            graph="cycle:8",
            rate=20.0,  # gradient steps per node per second
            until=until,
            cluster="train",
            metrics_file=tmp_path / "run.jsonl",
            json_path=tmp_path / "run.json",
            training=recipe,
        ),
        log_dir=tmp_path / "logs",
        broker=broker,
        timeout=150.0,
    )
    holder: dict[str, ClusterState] = {}

    def started(state: ClusterState, _: RunningBroker) -> None:
        holder["state"] = state

    summary = await run_up(config, started)
    return summary, holder["state"]


@pytest.mark.broker
async def test_with_no_gradient_steps_a2cid2_conserves_the_sum_of_the_models_to_1e_9(
    mosquitto: RunningBroker, tmp_path: Path
) -> None:
    # Each node starts from its own model (per-node), so the exchanges move real mass around:
    # with lr = 0 the sum over the nodes of x must stay that of the initial models.
    recipe = Recipe("mlp:64", "digits", "dirichlet:0.1:0", "a2cid2", lr=0.0, init="per-node")
    summary, state = await _up(tmp_path, recipe, until=1e-3, broker=mosquitto.url)
    assert summary.reached, state.message
    final = state.final
    assert final is not None
    assert final.complete
    values = np.array(final.values)
    initial = recipe.initial(recipe.problem("cycle:8"))
    assert values.shape == initial.shape == (8, 4810)
    drift = np.abs(values.sum(axis=0) - initial.sum(axis=0)).max()
    assert drift <= 1e-9, drift
    # Consensus was reached by exchanges: every node moved far from where it started.
    assert np.abs(values - initial).max() > 0.1
    assert summary.activations > 100
    views = state.nodes.values()
    assert all(v.counters.get("served", 0) > 0 for v in views)
