"""The coordinator's scores of a training run: the simulator's metrics, on exact points."""

from __future__ import annotations

import numpy as np

from coordinator.exact_curve import ExactCurve
from coordinator.train_measure import TrainTracker, report_period
from gossip.train.recipe import Recipe
from gossip.train.scores import evaluate


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


def test_reports_of_a_big_model_come_less_often_to_keep_the_byte_budget() -> None:
    assert report_period(8, 4810, 2.0) == 2.0
    small, big = report_period(64, 100_000, 2.0), report_period(128, 100_000, 2.0)
    assert big == 2 * small > 2.0
