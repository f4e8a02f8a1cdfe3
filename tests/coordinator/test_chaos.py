"""The chaos test: a secured grid:4x4 (mosquitto with passwords and an ACL, ``gossip
coordinator``, 16 ``gossip node``), every process under a restart policy, and a seeded schedule
that SIGKILLs a node, the broker or the coordinator every 2-6 s for 60 s, sometimes two at once.

The run must still reach eps, exactly (drift <= 1e-9), with a summary that agrees with the
nodes' own final reports and the exact curve, and leave no process behind. A failure prints the
seed and the schedule; ``GOSSIP_CHAOS_SEED=S pytest tests/coordinator/test_chaos.py`` replays
it (``benchmarks/bench_chaos.py`` runs ten seeds). The harness is ``_chaos.py``; the checks of
its verdict are tested here too, on doctored records, so that a false summary would be caught.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _chaos import ChaosConfig, chaos_schedule, chaos_seeds, check, run_chaos
from system_tools import require_mosquitto


@pytest.mark.cluster
@pytest.mark.broker
@pytest.mark.slow
@pytest.mark.solo
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", chaos_seeds([1]))
async def test_a_secured_cluster_under_chaos_reaches_eps_exactly_and_tells_the_truth(
    seed: int, tmp_path: Path
) -> None:
    require_mosquitto()
    result = await run_chaos(ChaosConfig(seed=seed, workdir=tmp_path))
    print(result.report())  # the seed and the schedule, in the test's output either way
    assert result.passed, result.report()
    # The chaos happened: every planned step up to the stop ran, and some were restarts of the
    # broker and the coordinator (the schedule has at least one of each).
    ran = {name for step in result.done for name in step.victims}
    assert {"broker", "coordinator"} <= ran, result.report()
    assert result.restarts.get("coordinator", 0) >= 1, result.report()


# -- the verdict's checks, on doctored records ---------------------------------------------------


def _records() -> tuple[dict[str, Any], dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """A true summary of two nodes (line:2, one-hot), their final reports and exact curve."""
    finals = {
        "node-0": {"node": 0, "t": 10.0, "x": [0.5], "z": [0.5], "final": True},
        "node-1": {"node": 1, "t": 10.0, "x": [0.5], "z": [0.5], "final": True},
    }
    metrics = [
        {"kind": "start", "params": {"eta": 0.1}},
        {"kind": "exact", "t": 4.0, "error": 1e-3},
        {"kind": "exact", "t": 6.0, "error": 5e-10},
    ]
    summary = {
        "reached": True,
        "stop_reason": "reached",
        "failure": None,
        "mass_drift_rel": 0.0,
        "final_error": 0.0,
        "final_t": 10.0,
        "missing_finals": [],
        "restarts": {},
        "t_eps": 6.0,
        "eps": 1e-9,
    }
    return summary, finals, metrics


def _verdict(summary: dict[str, Any], finals: dict[str, dict[str, Any]], metrics: list[Any]) -> str:
    return " | ".join(check(summary, finals, metrics, ChaosConfig(0, Path(".")), 2))


def test_a_true_summary_passes_the_checks() -> None:
    assert _verdict(*_records()) == ""


@pytest.mark.parametrize(
    ("doctor", "problem"),
    [
        (lambda s, f, m: s.update(reached=False, stop_reason="timeout"), "eps not reached"),
        (lambda s, f, m: s.update(mass_drift_rel=4.6e-4), "not exact"),
        (lambda s, f, m: f["node-1"].update(x=[0.6]), "final reports drift"),
        (lambda s, f, m: s.update(final_error=0.25e-9), "is not the nodes' final reports'"),
        (lambda s, f, m: s.update(t_eps=5.0), "not a point of the exact curve"),
        (lambda s, f, m: f.pop("node-1"), "gives a final error though ['node-1']"),
        (lambda s, f, m: s.update(final_error=None), "final error is unknown"),
        (lambda s, f, m: s.update(restarts={"node-3": 1}), "restarts it cannot see"),
    ],
)
def test_a_false_or_failed_summary_is_caught(doctor: Any, problem: str) -> None:
    summary, finals, metrics = _records()
    doctor(summary, finals, metrics)
    assert problem in _verdict(summary, finals, metrics)


def test_the_schedule_is_the_seeds_alone_and_hits_every_kind_of_process() -> None:
    assert chaos_schedule(3, 16) == chaos_schedule(3, 16)
    assert chaos_schedule(3, 16) != chaos_schedule(4, 16)
    steps = chaos_schedule(3, 16)
    assert all(0 < step.at < 60 and 1 <= len(step.victims) <= 2 for step in steps)
    assert all(len(set(step.victims)) == len(step.victims) for step in steps)
    victims = {name for step in steps for name in step.victims}
    assert {"broker", "coordinator"} <= victims
    assert any(name.startswith("node-") for name in victims)


def test_the_seed_variable_replays_given_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOSSIP_CHAOS_SEED", "7,11")
    assert chaos_seeds([1]) == [7, 11]
    monkeypatch.delenv("GOSSIP_CHAOS_SEED")
    assert chaos_seeds([1]) == [1]
