"""A training run's figures under their own names: its target, and what it says when short."""

from __future__ import annotations

from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.figures.train_figures import accuracy_not_reached
from continuized.coordinator.figures.train_measure import TrainPoint, TrainTracker
from continuized.gossip.train.recipe import Recipe


def test_a_run_short_of_its_accuracy_names_the_accuracy_not_the_error() -> None:
    state = ClusterState(graph="cycle:3", expected=3, eps=1e-6, rate=20.0)
    assert accuracy_not_reached(state, 60.0) is None  # averaging: the eps message stands
    recipe = Recipe("softmax", "iris", "iid:0")
    state.training = TrainTracker(recipe, recipe.problem("cycle:3"))
    assert accuracy_not_reached(state, 60.0) is None  # no --until-accuracy: its error's eps
    state.training.target = 0.99
    assert "its accuracy: unknown" in str(accuracy_not_reached(state, 60.0))
    state.training.points.append(TrainPoint(1211.2, 0.1, 0.9638, 0.9, 0.0, 0.0))
    text = accuracy_not_reached(state, 60.0)
    assert text == (
        "the accuracy did not reach 0.99 within --timeout 60 s (its accuracy: 0.9638 at "
        "t = 1211); try a longer --timeout, a higher --rate if this machine keeps up, or a "
        "lower --until-accuracy"
    )
