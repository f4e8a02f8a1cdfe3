"""Decentralized training on the live cluster: real node processes, a real broker.

Each node cuts its own shard of digits, builds the MLP (d = 4810), takes gradient steps on its
own clock and exchanges its parameters as raw buffers (gossip.wire.schema); A²CiD²'s jumps and
mixing are the exchange's, with its constants.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from continuized.cli.entries import NODE_ENTRIES
from continuized.coordinator.figures.records import RunSummary
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.local.broker import RunningBroker
from continuized.coordinator.local.launcher import run_up
from continuized.coordinator.local.settings import UpConfig
from continuized.coordinator.run.service import CoordinatorConfig
from continuized.gossip.train.recipe import Recipe

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.solo, pytest.mark.timeout(300)]


async def _up(
    tmp_path: Path,
    recipe: Recipe,
    until: float,
    broker: str | None = None,
    until_accuracy: float | None = None,
    graph: str = "cycle:8",
) -> tuple[RunSummary, ClusterState]:
    config = UpConfig(
        entries=NODE_ENTRIES,
        coordinator=CoordinatorConfig(
            graph=graph,
            rate=20.0,  # gradient steps per node per second
            until=until,
            cluster="train",
            metrics_file=tmp_path / "run.jsonl",
            json_path=tmp_path / "run.json",
            training=recipe,
            until_accuracy=until_accuracy,
            training_runs=0,  # no simulator band: the verdict has a test of its own below
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


@pytest.mark.broker
async def test_a_model_past_what_a_bootstrap_list_carries_trains_live_and_conserves_its_sum(
    mosquitto: RunningBroker, tmp_path: Path
) -> None:
    # mlp:256:64 on digits has 33,738 parameters: no Bootstrap carries it (each node draws its
    # own, the simulator's row), every exchange carries it whole, every report as JSON.
    recipe = Recipe("mlp:256:64", "digits", "iid:0", "a2cid2", lr=0.0, init="per-node")
    summary, state = await _up(tmp_path, recipe, until=1e-2, broker=mosquitto.url, graph="cycle:4")
    assert summary.reached, state.message
    final = state.final
    assert final is not None
    assert final.complete
    values = np.array(final.values)
    initial = recipe.initial(recipe.problem("cycle:4"))
    assert values.shape == initial.shape == (4, 33_738)
    # The nodes started from the simulator's models: the coordinator's own draw of them.
    assert np.array_equal(np.array(state.initial), initial)
    drift = np.abs(values.sum(axis=0) - initial.sum(axis=0)).max()
    assert drift <= 1e-9 * np.abs(initial).sum(axis=0).max(), drift
    assert np.abs(values - initial).max() > 0.1  # exchanges moved the models
    assert all(v.counters.get("served", 0) > 0 for v in state.nodes.values())


@pytest.mark.broker
async def test_the_nodes_train_the_mlp_until_the_average_model_reaches_the_accuracy_asked(
    mosquitto: RunningBroker, tmp_path: Path
) -> None:
    recipe = Recipe("mlp:64", "digits", "iid:0", "a2cid2", lr=0.05, momentum=0.9)
    summary, state = await _up(
        tmp_path, recipe, until=1e-12, broker=mosquitto.url, until_accuracy=0.85
    )
    assert summary.reached, state.message
    tracker = state.training
    assert tracker is not None
    assert tracker.t_target is not None
    assert summary.t_eps == tracker.t_target
    at_target = next(p for p in tracker.points if p.t == tracker.t_target)
    assert at_target.accuracy >= 0.85
    # Scored on the exact points only, from t = 0: the common start's consensus is 0 there.
    assert tracker.points[0].t == 0.0
    assert tracker.points[0].consensus == 0.0
    assert tracker.points[0].accuracy < 0.5  # an untrained model
    written = json.loads((tmp_path / "run.json").read_text())
    assert written["algorithm"] == "a2cid2"
    assert written["training"]["model"] == "mlp:64"
    assert written["training"]["t_to_accuracy"] == tracker.t_target
    assert written["training"]["accuracy"] is None or written["training"]["accuracy"] > 0.5


@pytest.mark.broker
@pytest.mark.timeout(180)  # about 45 s; the rest is for a machine loaded far beyond its cores
async def test_the_live_accuracy_curve_is_typical_of_the_simulators_runs_of_its_settings(
    mosquitto: RunningBroker, tmp_path: Path
) -> None:
    # rate 1.25: one exact point every 2.5 units of t (a report period of 2 s), so the
    # accuracy's rise (0.1 to 0.8 by t = 30 at lr 0.2) is judged on a dozen points, among 60
    # of the simulator's runs (30 more draw the band). 90 runs to t = 37.5: about 10 s of CPU.
    # The run stops on the exact curve's accuracy, not on a wall-clock deadline.
    recipe = Recipe("mlp:16", "digits", "iid:0", "a2cid2", lr=0.2)
    config = UpConfig(
        entries=NODE_ENTRIES,
        coordinator=CoordinatorConfig(
            graph="cycle:8",
            rate=1.25,
            until=1e-12,
            cluster="train-check",
            json_path=tmp_path / "run.json",
            training=recipe,
            training_runs=90,
            until_accuracy=0.8,
            # The default start delay: a node whose model is built after t = 0 takes its first
            # gradient steps late, at once (node.daemon), so the curve does not lag the model.
        ),
        log_dir=tmp_path / "logs",
        broker=mosquitto.url,
        timeout=30.0,  # t = 37.5: the band's last t
    )
    holder: dict[str, ClusterState] = {}

    def started(state: ClusterState, _: RunningBroker) -> None:
        holder["state"] = state

    summary = await run_up(config, started)
    state = holder["state"]
    assert summary.reached, state.message
    tracker = state.training
    assert tracker is not None
    assert tracker.band_status == "ready", tracker.band_status
    assert tracker.band is not None
    assert tracker.band.t[-1] == 37.5
    agreement = tracker.agreement
    assert agreement is not None
    assert len(agreement.t) >= 8, agreement.t
    # The curve rose through the band: it is not judged on a plateau.
    assert agreement.error[0] - agreement.error[-1] > 0.4, agreement.error
    written = json.loads((tmp_path / "run.json").read_text())["training"]["agreement"]
    assert written["null_runs"] == 60
    assert written["typical"] == agreement.typical(written["alpha"])
    assert agreement.typical(written["alpha"]), f"{agreement.verdict()}; t = {agreement.t.tolist()}"
