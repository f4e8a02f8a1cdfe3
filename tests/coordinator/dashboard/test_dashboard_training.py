"""A training run on the dashboard: accuracy, loss and consensus with the simulator's band.

The figures are the training simulator's own (softmax on digits over cycle:4): one more run of
the model plays the live run, fed point by point into a real :class:`TrainTracker` while a
synthetic cluster feeds the gossip side, and a real Chromium draws the page.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from dash_helpers import ARTIFACTS, CHROMIUM, chromium_tab, need

from continuized.coordinator.dashboard.band import BandKeeper
from continuized.coordinator.dashboard.feed import Client, Feed, training_view
from continuized.coordinator.dashboard.runs import RunArchive
from continuized.coordinator.dashboard.synthetic import SyntheticCluster
from continuized.coordinator.dashboard.views import headline
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.figures.train_measure import (
    TrainBand,
    TrainPoint,
    TrainTracker,
    simulate_train_band,
)
from continuized.coordinator.run.config import CoordinatorConfig, prepare
from continuized.gossip.errors import ConfigError
from continuized.gossip.train.recipe import Recipe
from continuized.gossip.train.trainer import run_once

RECIPE = Recipe("softmax", "digits", "iid:0", lr=0.2)
GRID = np.arange(0.0, 44.0, 4.0)


@pytest.fixture(scope="module")
def simulated() -> tuple[TrainBand, np.ndarray]:
    """The band (10 runs, 40 to judge among) and one more run's metrics (the "live" run)."""
    problem = RECIPE.problem("cycle:4")
    band = simulate_train_band(problem, "a2cid2", GRID, 10, 40, 0)
    # The live run's start and mini-batches, with a timing of its own (run 999's events).
    return band, run_once(problem, "a2cid2", GRID, 0, 0, clock=999)


def _training_state(cluster: SyntheticCluster) -> tuple[ClusterState, TrainTracker]:
    state = cluster.new_state()
    tracker = TrainTracker(RECIPE, RECIPE.problem("cycle:4"))
    state.training = tracker
    return state, tracker


def _point(rows: np.ndarray, k: int, wall: float) -> TrainPoint:
    loss, accuracy, node_accuracy, consensus = (float(v) for v in rows[:, k])
    return TrainPoint(float(GRID[k]), loss, accuracy, node_accuracy, consensus, wall)


def test_batches_carry_each_new_training_point_once_and_a_band_event_when_it_changes(
    simulated: tuple[TrainBand, np.ndarray],
) -> None:
    band, rows = simulated
    cluster = SyntheticCluster("cycle:4", "arg", rate=100.0, seed=1, run_id="train")
    state, tracker = _training_state(cluster)
    feed = Feed(state, RunArchive())
    client = Client()
    feed.clients.add(client)
    assert feed.tick(1.0)["train"] == []
    tracker.points += [_point(rows, 0, 10.0), _point(rows, 1, 12.0)]
    batch = feed.tick(2.0)
    assert [r[0] for r in batch["train"]] == [0.0, 4.0]
    assert batch["train"][1][2] == pytest.approx(rows[1, 1])  # the accuracy column
    assert feed.tick(3.0)["train"] == []
    # An unknown figure travels as null, never as a number.
    tracker.points.append(TrainPoint(8.0, 1.0, math.nan, math.nan, 0.0, 14.0))
    assert feed.tick(4.0)["train"] == [[8.0, 1.0, None, None, 0.0, 14.0]]
    events = [client.queue.get_nowait() for _ in range(client.queue.qsize())]
    assert [kind for kind, _ in events if kind == "band"] == []
    tracker.band, tracker.band_status = band, "ready"
    feed.tick(5.0)
    events = [client.queue.get_nowait() for _ in range(client.queue.qsize())]
    assert ("band", json.dumps({"run_id": "train", "kind": "training"})) in events
    view = training_view(state, feed.train_sent)
    assert view is not None
    assert view["band"]["runs"] == 10
    assert view["band"]["t"] == GRID.tolist()
    assert view["curve"][2][2] is None
    assert view["agreement"]["typical"] is None  # not judged yet: the run goes on


def test_a_gossip_run_has_no_training_view() -> None:
    cluster = SyntheticCluster("cycle:4", "arg", rate=100.0, seed=1, run_id="gossip")
    assert training_view(cluster.new_state(), 0) is None


async def _feed_cluster(
    cluster: SyntheticCluster, state: ClusterState, stop: asyncio.Event
) -> None:
    while not stop.is_set():
        cluster.feed(state)
        await asyncio.sleep(0.1)


async def _wait_for(page: Any, expression: str, timeout_s: float = 30.0) -> None:
    await page.wait_for_function(expression, timeout=timeout_s * 1000)


@pytest.mark.browser
@pytest.mark.timeout(120)
async def test_the_page_draws_accuracy_loss_and_consensus_with_the_band_and_the_verdict(
    start_dashboard: Callable[..., Any], simulated: tuple[TrainBand, np.ndarray]
) -> None:
    need(CHROMIUM)
    band, rows = simulated
    cluster = SyntheticCluster("cycle:4", "arg", rate=100.0, seed=1, run_id="train")
    state, tracker = _training_state(cluster)
    tracker.band_status = "pending"
    served = await start_dashboard(state, interval=0.1)
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(_feed_cluster(cluster, state, stop), name="synthetic-cluster")
        try:
            async with chromium_tab() as tab:
                page = tab.page
                await page.goto(served.url)
                await _wait_for(page, "window.__dash && window.__dash.snapshots >= 1")
                assert await page.locator("#training-panel").is_visible()
                # No point yet: the accuracy is unknown, and so is the band.
                note = await page.locator("#training-note").inner_text()
                assert "test accuracy unknown" in note, note
                assert "simulator band: pending" in note, note
                verdict = await page.locator("#training-verdict").inner_text()
                assert "unknown" in verdict, verdict

                # Points arrive in batches and extend the three charts.
                for k in range(4):
                    tracker.points.append(_point(rows, k, cluster.epoch + k))
                    await asyncio.sleep(0.15)
                await _wait_for(page, "window.__dash.trainPoints() === 4")
                got = await page.evaluate("document.getElementById('train-accuracy').data.at(-1).y")
                assert got == pytest.approx(rows[1, :4].tolist())

                # The band arrives: the page reloads and draws it under every curve.
                tracker.band, tracker.band_status = band, "ready"
                await _wait_for(page, "window.__dash.trainBand() === 10")
                for chart in ("train-accuracy", "train-loss", "train-consensus"):
                    names = await page.evaluate(
                        f"document.getElementById('{chart}').data.map(t => t.name || '')"
                    )
                    assert "simulator 5–95% (10 runs)" in names, (chart, names)
                q95 = await page.evaluate("document.getElementById('train-accuracy').data[1].y")
                assert q95 == pytest.approx(band.as_dict()["accuracy"]["q95"])
                await _wait_for(page, "window.__dash.trainPoints() === 4")
                for k in range(4, len(GRID)):
                    tracker.points.append(_point(rows, k, cluster.epoch + k))
                await _wait_for(page, f"window.__dash.trainPoints() === {len(GRID)}")

                # The run ends: the verdict on its accuracy curve is shown.
                assert tracker.judge() is not None
                typical = tracker.summary()["agreement"]["typical"]
                word = "typical" if typical else "ATYPICAL"
                await _wait_for(
                    page,
                    "document.getElementById('training-verdict').textContent"
                    f".includes('{word} of its 40 runs')",
                )
                ARTIFACTS.mkdir(exist_ok=True)
                await page.screenshot(
                    path=str(ARTIFACTS / "dashboard-training.png"), full_page=True
                )
                assert tab.errors() == []
        finally:
            stop.set()


def test_the_runs_table_shows_the_training_bands_status_not_a_gossip_band() -> None:
    cluster = SyntheticCluster("cycle:4", "arg", rate=100.0, seed=1, run_id="train")
    state, tracker = _training_state(cluster)
    archive = RunArchive()
    archive.follow(state)
    keeper = BandKeeper(state, archive, max_runs=8)
    started: list[str] = []
    keeper.spawn = lambda work, name: started.append(name)
    tracker.band_status = "pending"
    keeper.maybe_start()
    assert archive.live is not None
    assert archive.live.band_status == "pending"
    assert started == []  # no gossip band is simulated for a training run


def test_a_training_run_with_too_few_simulator_runs_is_refused() -> None:
    config = CoordinatorConfig(graph="cycle:4", training=RECIPE, training_runs=2)
    with pytest.raises(
        ConfigError, match=re.escape("training_runs must be 0 (no band) or >= 3, got 2")
    ):
        prepare(config)


def test_a_training_runs_header_speaks_training_and_its_row_names_its_algorithm() -> None:
    cluster = SyntheticCluster("cycle:4", "arg", rate=100.0, seed=1, run_id="train")
    state, tracker = _training_state(cluster)
    tracker.target = 0.9
    cluster.feed(state, cluster.epoch + 1.0)
    tracker.points.append(TrainPoint(4.0, 1.0, 0.5, 0.4, 0.1, cluster.epoch + 0.5))
    archive = RunArchive()
    archive.follow(state)
    now = cluster.epoch + 1.5
    head = headline(state, now, 180.0)
    assert head["task"] == "training"
    assert head["target"] == {"accuracy": 0.9}
    # The coordinator's target t (here the synthetic cluster's), and its wall time.
    assert head["t_target"] == state.t_eps
    assert head["wall_s_target"] == (None if state.t_eps is None else state.t_eps / 100.0)
    assert head["rate_per_node_asked"] == 100.0
    assert head["rate_network_asked"] == 100.0 * 4 * RECIPE.rate_com / 2
    assert head["rate_network_achieved"] == 180.0  # the feed's, while the run goes on
    assert head["training"]["accuracy"] == 0.5
    assert head["freshness"]["point_age_s"] == pytest.approx(1.0)
    # The runs table names the training algorithm, not the ARG its exchanges run.
    assert archive.live is not None
    assert (archive.live.algorithm, archive.live.problem) == ("a2cid2", "train softmax on digits")
    # A gossip run's header has none of it.
    gossip = SyntheticCluster("cycle:4", "arg", rate=100.0, seed=1, run_id="gossip")
    plain = headline(gossip.new_state(), now, None)
    assert plain["task"] == "averaging"
    assert "target" not in plain
