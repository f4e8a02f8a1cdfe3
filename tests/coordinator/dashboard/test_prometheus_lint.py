"""/metrics follows Prometheus's conventions, for a gossip, an optimization and a training run.

The conventions are stated once, as :func:`convention_problems` (no binary needed), and checked
by ``promtool check metrics`` too, on the same expositions. A real cluster's scrape is linted
by tests/coordinator/dashboard/test_dashboard_live.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import numpy as np
import pytest
from dash_helpers import promtool_problems
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from continuized.coordinator.dashboard.prometheus import make_registry
from continuized.coordinator.dashboard.synthetic import SyntheticCluster
from continuized.coordinator.figures.optimization import OptTask, OptTracker
from continuized.coordinator.figures.records import FinalResult, RunSummary
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.figures.train_measure import TrainPoint, TrainTracker
from continuized.gossip.train.recipe import Recipe

# A physical quantity is named in its base unit, as the name's last word (before _total).
BASE_UNITS = frozenset({"seconds", "bytes", "ratio"})
OTHER_UNITS = frozenset(
    {
        "milliseconds", "microseconds", "nanoseconds", "minutes", "hours", "days",
        "ms", "us", "ns", "sec", "secs", "kilobytes", "megabytes", "gigabytes", "kb", "mb",
        "gb", "bits", "percent", "pct",
    }
)  # fmt: skip

# The mistakes /metrics once made: each must be caught by both checks.
OLD_STYLE = """\
# HELP gossip_node_rtt_milliseconds Exchange round-trip time percentile.
# TYPE gossip_node_rtt_milliseconds gauge
gossip_node_rtt_milliseconds{node="0",quantile="0.5"} 0.4
# HELP gossip_node_jump_lag Percentile of the lag.
# TYPE gossip_node_jump_lag gauge
gossip_node_jump_lag{node="0",quantile="0.99"} 1.5
# HELP gossip_activations Edge activations completed.
# TYPE gossip_activations counter
gossip_activations 12.0
"""


TYPE_LINE = re.compile(r"# TYPE (\S+) (\S+)")
HELP_LINE = re.compile(r"# HELP (\S+) ?(.*)")
SAMPLE_LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? \S+( \S+)?")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


def convention_problems(exposition: str) -> list[str]:
    """Return how ``exposition`` breaks Prometheus's naming conventions (``[]``: it does not).

    Read from the text as served, not through prometheus-client's parser, which adds the
    ``_total`` a counter lacks. A counter's name ends in ``_total`` and nothing else's does;
    only a summary's samples carry a ``quantile`` label (and only a histogram's ``le``), and
    only theirs add ``_count``, ``_sum`` or ``_bucket`` to the family's name; units are base
    units, named last; every family has help text and a snake_case name under ``gossip``.
    """
    problems: list[str] = []
    helps: dict[str, str] = {}
    name, kind = "", ""
    for line in exposition.splitlines():
        if help_line := HELP_LINE.fullmatch(line):
            helps[help_line[1]] = help_line[2]
        elif type_line := TYPE_LINE.fullmatch(line):
            name, kind = type_line[1], type_line[2]
            problems.extend(_name_problems(name, kind, helps.get(name, "")))
        elif line and not line.startswith("#"):
            sample = SAMPLE_LINE.fullmatch(line)
            assert sample is not None, line
            labels = set(LABEL.findall(sample[2] or ""))
            where = f"{name} ({kind}): sample {sample[1]}"
            suffixes = {
                "summary": ("", "_count", "_sum"),
                "histogram": ("_bucket", "_count", "_sum"),
            }
            if sample[1] not in {name + end for end in suffixes.get(kind, ("",))}:
                problems.append(f"{where}: not a name of its family")
            if "quantile" in labels and (kind, sample[1]) != ("summary", name):
                problems.append(f"{where}: only summaries carry a quantile label")
            if "le" in labels and (kind, sample[1]) != ("histogram", name + "_bucket"):
                problems.append(f"{where}: only histograms carry an le label")
    return problems


def _name_problems(name: str, kind: str, help_text: str) -> list[str]:
    problems = []
    if not re.fullmatch(r"gossip(_[a-z0-9]+)*", name):
        problems.append(f"{name}: not a snake_case name under gossip_")
    if not help_text.strip():
        problems.append(f"{name}: no help text")
    if (kind == "counter") != name.endswith("_total"):
        problems.append(f"{name} ({kind}): only counters' names end in _total")
    words = name.removesuffix("_total").split("_")
    problems.extend(f"{name}: {w!r} is not a base unit" for w in words if w in OTHER_UNITS)
    problems.extend(
        f"{name}: the unit {w!r} is not the last word" for w in words[:-1] if w in BASE_UNITS
    )
    return problems


def _exposition(state: ClusterState) -> str:
    return generate_latest(make_registry(state, lambda: (95.0, 1, 10))).decode()


def _finish(state: ClusterState, drift: float) -> None:
    """End the run as the coordinator does: final result, run summary, every node final."""
    state.final = FinalResult(state.t + 3.0, 2.5e-7, drift, (), (0.0,), True)
    state.runs.append(
        RunSummary(
            run_id=state.run_id,
            reached=True,
            t_eps=state.t,
            wall_s=2.0,
            activations=state.activations(),
            rate_achieved=98.0,
            rate_asked=state.rate,
            final_error=2.5e-7,
            mass_drift_rel=drift,
            rtt_p50_ms=0.5,
            rtt_p99_ms=2.0,
            stop_reason="reached",
        )
    )
    state.mark_reached(state.t, state.history[-1].wall)
    for view in state.nodes.values():
        view.final = True
    state.set_phase("done")


def _registering() -> ClusterState:
    """A coordinator waiting for its nodes: no node, no point, families without samples."""
    return ClusterState(graph="grid:3x3", expected=9, rate=100.0, run_id="waiting")


def _gossip() -> ClusterState:
    """A gossip run under way: an exact curve, a stopped node, one without round trips yet."""
    cluster = SyntheticCluster("grid:3x3", "arg", rate=100.0, seed=3, run_id="gossip")
    state = cluster.new_state()
    cluster.feed(state, time.time() - 0.5)
    cluster.feed(state)
    state.exact.append(state.history[-1])
    state.nodes[4].final = True
    state.nodes[2].rtt_p50_ms = state.nodes[2].rtt_p99_ms = None
    state.broker.reconnects = 2
    return state


def _optimization() -> ClusterState:
    """A finished optimization run: two-dimensional x, no exact curve, the dual sums' drift."""
    cluster = SyntheticCluster("cycle:6", "arg", rate=100.0, seed=4, run_id="acd")
    state = cluster.new_state()
    state.optimization = OptTracker(
        OptTask(
            problem="logistic:0.01",
            data="synthetic:0",
            split="iid:0",
            dim=2,
            mu=1.0,
            L=1.0,
            eta=0.1,
            c=2.0,
            theta=0.05,
            steps=(0.5,),
            params={"eta": 0.1},
            x_star=np.array([1.0, 1.0]),
            value_star=0.0,
        )
    )
    cluster.feed(state)
    for view in state.nodes.values():
        view.x = view.z = (view.x[0], 1.0 - view.x[0])
    _finish(state, drift=3.0e-17)
    return state


def _training() -> ClusterState:
    """A training run under way: each node's x is a whole model's parameters."""
    recipe = Recipe("softmax", "digits", "iid:0", lr=0.2)
    cluster = SyntheticCluster("cycle:4", "arg", rate=100.0, seed=5, run_id="train")
    state = cluster.new_state()
    state.training = TrainTracker(recipe, recipe.problem("cycle:4"))
    cluster.feed(state)
    rng = np.random.default_rng(5)
    for view in state.nodes.values():
        view.x = view.z = tuple(float(v) for v in rng.normal(size=650))
        view.lag_p99 = None  # one percentile known, the other not yet
    state.broker.connected = False
    return state


RUNS: dict[str, Callable[[], ClusterState]] = {
    "registering": _registering,
    "gossip": _gossip,
    "optimization": _optimization,
    "training": _training,
}


@pytest.mark.parametrize("run", list(RUNS))
def test_metrics_follow_the_naming_conventions(run: str) -> None:
    assert convention_problems(_exposition(RUNS[run]())) == []


def test_the_conventions_catch_the_old_names() -> None:
    problems = convention_problems(OLD_STYLE)
    for name in ("gossip_node_rtt_milliseconds", "gossip_node_jump_lag", "gossip_activations"):
        assert any(p.startswith(f"{name}") for p in problems), (name, problems)


def test_quantiles_are_summaries_in_base_units() -> None:
    state = _gossip()
    families = {f.name: f for f in text_string_to_metric_families(_exposition(state))}
    rtt, lag = families["gossip_node_rtt_seconds"], families["gossip_node_jump_lag"]
    assert (rtt.type, lag.type) == ("summary", "summary")
    view = state.nodes[0]
    got = {(s.labels["node"], s.labels["quantile"]): s.value for s in rtt.samples}
    assert view.rtt_p50_ms is not None
    assert got[("0", "0.5")] == pytest.approx(view.rtt_p50_ms / 1000.0)
    assert ("2", "0.5") not in got  # unknown: left out
    lags = {(s.labels["node"], s.labels["quantile"]): s.value for s in lag.samples}
    assert lags[("0", "0.99")] == view.lag_p99


def test_a_training_run_exports_its_scores_and_no_averaging_figure() -> None:
    state = _training()
    assert state.training is not None
    state.training.points.append(TrainPoint(12.0, 0.7, 0.81, 0.78, 0.05, 0.0))
    state.training.target, state.training.t_target = 0.8, 12.0
    families = {f.name: f for f in text_string_to_metric_families(_exposition(state))}
    for averaging in ("gossip_error", "gossip_mass_drift_rel", "gossip_reached", "gossip_eps"):
        assert averaging not in families
    got = {name: families[name].samples[0].value for name in families if families[name].samples}
    assert (got["gossip_t"], got["gossip_accuracy"], got["gossip_loss"]) == (12.0, 0.81, 0.7)
    assert (got["gossip_consensus"], got["gossip_t_accuracy"]) == (0.05, 12.0)


@pytest.mark.parametrize("run", list(RUNS))
def test_promtool_finds_no_problem(run: str) -> None:
    assert promtool_problems(_exposition(RUNS[run]())) == []


def test_promtool_finds_the_old_names_problems() -> None:
    problems = promtool_problems(OLD_STYLE)
    for name in ("gossip_node_rtt_milliseconds", "gossip_node_jump_lag"):
        assert any(p.startswith(f"{name} ") for p in problems), (name, problems)
