"""The coordinator's scores of a training run: the simulator's metrics, on exact points."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from continuized.coordinator.figures.exact_curve import ExactCurve
from continuized.coordinator.figures.train_measure import (
    MIN_BAND_RUNS,
    TRAIN_BAND_BUDGET,
    TrainBand,
    TrainPoint,
    TrainTracker,
    band_budget,
    band_plan,
    report_period,
    simulate_in_child,
    simulate_train_band,
    train_grid,
    verdict_alpha,
)
from continuized.gossip.errors import ConfigError
from continuized.gossip.train.recipe import Recipe
from continuized.gossip.train.scores import DIVERGED_GROWTH, evaluate
from continuized.gossip.train.trainer import run_once


def test_each_exact_point_is_scored_as_the_simulator_scores_it_and_the_target_is_timed() -> None:
    recipe = Recipe("softmax", "iris", "iid:0", init="per-node")
    problem = recipe.problem("cycle:3")
    start = recipe.initial(problem)
    tracker = TrainTracker(recipe, problem, target=0.0)  # any accuracy reaches 0
    curve = ExactCurve(start, tracker.measure(start))
    assert tracker.latest is None
    assert tracker.summary()["accuracy"] is None  # unknown before any point
    for node in range(3):
        points = curve.add(node, [(0.0, tuple(start[node])), (5.0, tuple(start[node]))], 1.0)
    assert [p.t for p in points] == [0.0, 5.0]
    want = evaluate(problem.model, start, problem.data)
    got = tracker.points[-1]
    assert (got.loss, got.accuracy, got.node_accuracy, got.consensus) == want
    assert points[0].error > 0  # averaging's error of the per-node models
    assert tracker.t_target == 0.0
    tracker.finish(9.0, np.repeat(start[:1], 3, axis=0))
    summary = tracker.summary()
    assert summary["final_exact"] is True
    assert summary["t"] == 9.0
    assert summary["consensus"] == 0.0  # one model everywhere


def test_a_live_loss_diverges_by_the_offline_rule() -> None:
    recipe = Recipe("softmax", "iris", "iid:0")
    tracker = TrainTracker(recipe, recipe.problem("cycle:3"))
    assert not tracker.diverged  # no point yet: unknown, not diverged

    def point(t: float, loss: float) -> TrainPoint:
        return TrainPoint(t, loss, 0.5, 0.5, 0.0, 0.0)

    tracker.points += [point(0.0, 1.1), point(1.0, 40.0)]
    assert not tracker.diverged  # it grew, well within the bound
    tracker.points.append(point(2.0, 1.1 * DIVERGED_GROWTH * 2))
    assert tracker.diverged  # finite, and past the bound: as gossip train judges it
    tracker.points[-1] = point(2.0, 0.5)
    tracker.final = point(3.0, float("inf"))
    assert tracker.diverged


def test_reports_of_a_big_model_come_less_often_to_keep_the_byte_budget() -> None:
    assert report_period(8, 4810, 2.0) == 2.0
    small, big = report_period(64, 100_000, 2.0), report_period(128, 100_000, 2.0)
    assert big == 2 * small > 2.0


_RECIPE = Recipe("softmax", "digits", "iid:0", lr=0.2)


@pytest.fixture(scope="module")
def simulated() -> TrainBand:
    # A small real problem: softmax on digits over cycle:4, 20 runs for the band, 100 to judge
    # among (about 4 s of CPU), shared by the tests below.
    grid = train_grid(4.0, 4, 120, t_end=40.0)
    return simulate_train_band(_RECIPE.problem("cycle:4"), "a2cid2", grid, 20, 100, 0)


def _simulated_tracker(band: TrainBand) -> tuple[TrainTracker, TrainBand]:
    return TrainTracker(_RECIPE, _RECIPE.problem("cycle:4")), band


def _with_curve(tracker: TrainTracker, t: np.ndarray, accuracy: np.ndarray) -> None:
    tracker.points = [
        TrainPoint(float(g), 1.0, float(a), float(a), 0.0, 0.0)
        for g, a in zip(t, accuracy, strict=True)
    ]


def test_a_run_of_the_model_is_judged_typical_and_the_same_run_lagging_is_not(
    simulated: TrainBand,
) -> None:
    tracker, band = _simulated_tracker(simulated)
    assert band.band.runs == 20
    assert band.null.runs == 100
    assert band.t.tolist() == [4.0 * k for k in range(11)]
    # One more run of the model itself plays the live run: the live run's start and
    # mini-batches, and a timing of its own (the events of run 999, in neither set).
    own = run_once(tracker.problem, "a2cid2", band.t, 0, 0, clock=999)[1]
    assert own[-1] - own[0] > 0.3  # the accuracy rises over the grid: a curve, not a plateau
    tracker.band, tracker.band_status = band, "ready"
    _with_curve(tracker, band.t, own)
    verdict = tracker.judge()
    assert verdict is not None
    assert len(verdict.t) == 11
    summary = tracker.summary()["agreement"]
    assert summary["typical"] is True, verdict.verdict()
    assert summary["alpha"] == verdict_alpha(100) == pytest.approx(0.025, abs=1e-3)
    # The same run, 0.1 of accuracy lower at every point (a cluster whose nodes lag): atypical.
    _with_curve(tracker, band.t, own - 0.1)
    lagging = tracker.judge()
    assert lagging is not None
    assert not lagging.typical(summary["alpha"]), lagging.verdict()
    assert lagging.log_ratio_median > 0  # its test error sits above the simulator's median
    assert tracker.summary()["agreement"]["typical"] is False


def test_without_the_simulators_runs_the_verdict_is_unknown_and_says_why() -> None:
    recipe = Recipe("softmax", "iris", "iid:0")
    tracker = TrainTracker(recipe, recipe.problem("cycle:3"))
    assert tracker.judge() is None
    assert tracker.summary()["agreement"] == {"typical": None, "status": "off"}
    tracker.band_status = "unavailable: the simulation took over 300 s"
    assert tracker.summary()["agreement"]["status"] == tracker.band_status


def test_the_band_is_the_quantiles_of_the_band_runs_unknown_where_a_metric_is_nan(
    simulated: TrainBand,
) -> None:
    band = TrainBand(copy.deepcopy(simulated.band), simulated.null)
    view = band.as_dict()
    assert view["runs"] == 20
    assert view["t"] == band.t.tolist()
    accuracy = band.band.curves["accuracy"]
    assert view["accuracy"]["q50"] == pytest.approx(np.median(accuracy, axis=0).tolist())
    assert view["accuracy"]["q05"] == pytest.approx(np.quantile(accuracy, 0.05, axis=0).tolist())
    assert all(lo <= hi for lo, hi in zip(view["loss"]["q05"], view["loss"]["q95"], strict=True))
    # A model without predict has no accuracy: the band says unknown, not 0.
    band.band.curves["accuracy"][:] = np.nan
    assert band.as_dict()["accuracy"]["q50"] == [None] * len(band.t)


def test_the_band_stops_at_the_runs_timeout_or_its_cost_budget() -> None:
    assert train_grid(2.5, 8, 90, t_end=30.0)[-1] == 30.0
    assert train_grid(40.0, 8, 150)[-1] * 150 * 8 <= TRAIN_BAND_BUDGET
    assert len(train_grid(40.0, 8, 150, budget=1.0)) == 2  # never less than two points
    with pytest.raises(ConfigError, match="step > 0"):
        train_grid(0.0, 8, 150)


def test_a_larger_models_band_takes_about_the_cpu_of_a_small_ones_with_fewer_runs_if_need_be() -> (
    None
):
    small = band_plan(40.0, 8, 150, 1e9, 4_810)
    assert small[1] == 150
    assert small[0][-1] * 150 * 8 <= TRAIN_BAND_BUDGET
    # A model 7 times the size: a budget 3 to 4 times smaller (its fixed cost is shared).
    assert 3 < TRAIN_BAND_BUDGET / band_budget(33_738) < 4
    grid, runs = band_plan(4.0, 8, 150, 1e9, 33_738)
    assert runs == 150
    assert grid[-1] * 150 * 8 <= band_budget(33_738) < small[0][-1] * 150 * 8
    assert grid[-1] > band_budget(33_738) / (150 * 8) - 4.0  # as far as the budget goes
    # Reported every 136 t: two points for 150 runs would pass the budget, so fewer runs.
    grid, runs = band_plan(136.0, 4, 150, 1e9, 85_002)
    assert grid.tolist() == [0.0, 136.0]
    assert MIN_BAND_RUNS <= runs < 150
    assert runs * 4 * 136.0 <= band_budget(85_002)
    # Too few to judge among: no band at all; unless so few were asked for.
    assert band_plan(294.0, 4, 150, 1e9, 167_178)[1] == 0
    assert band_plan(294.0, 4, 6, 1e9, 167_178)[1] == 6


async def test_a_band_too_costly_for_its_model_is_unavailable_and_says_why() -> None:
    recipe = Recipe("mlp:512:256", "digits", "iid:0")
    tracker = TrainTracker(recipe, recipe.problem("cycle:4"))
    await simulate_in_child(tracker, 294.0, 150, t_end=2400.0)
    assert tracker.band is None
    assert tracker.band_status.startswith("unavailable: 30 runs of this 167,178-parameter")


async def test_the_band_is_computed_in_a_child_process_and_a_failure_is_its_status() -> None:
    tracker = TrainTracker(_RECIPE, _RECIPE.problem("cycle:4"))
    await simulate_in_child(tracker, 4.0, 6, t_end=8.0)
    assert tracker.band_status == "ready"
    assert tracker.band is not None
    assert tracker.band.t.tolist() == [0.0, 4.0, 8.0]
    assert (tracker.band.band.runs, tracker.band.null.runs) == (2, 4)
    # The same runs as in this process: the child simulates, nothing else.
    here = simulate_train_band(tracker.problem, "a2cid2", tracker.band.t, 2, 4, 0)
    np.testing.assert_array_equal(here.null.curves["loss"], tracker.band.null.curves["loss"])
    failed = TrainTracker(_RECIPE, _RECIPE.problem("cycle:4"))
    await simulate_in_child(failed, 0.0, 6, t_end=8.0)
    assert failed.band is None
    assert failed.band_status.startswith("unavailable: the band needs step > 0"), failed.band_status
