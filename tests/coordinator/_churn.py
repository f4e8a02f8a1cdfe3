"""The coordinator of the churn tests (test_churn_live, test_churn_secure): line:8 at 60/s,
one-hot values to 1e-8, short timings; each test overrides what it needs."""

from __future__ import annotations

from pathlib import Path

from coordinator.broker import RunningBroker
from coordinator.procs import free_port
from coordinator.service import CoordinatorConfig


def churn_config(broker: RunningBroker, tmp_path: Path, **over: object) -> CoordinatorConfig:
    """A coordinator's config on ``broker``, with files under ``tmp_path``; ``over`` wins."""
    base: dict[str, object] = {
        "graph": "line:8",
        "broker": broker.url,
        "bind": f"tcp://127.0.0.1:{free_port()}",
        "rate": 60.0,
        "values": "onehot",
        "until": 1e-8,
        "cluster": f"t{free_port()}",
        "metrics_file": tmp_path / "run.jsonl",
        "json_path": tmp_path / "run.json",
        "metrics_period": 0.05,
        "start_delay": 0.5,
        "register_timeout": 90.0,
        "stop_timeout": 15.0,
        "run_timeout": 200.0,
    }
    base.update(over)
    return CoordinatorConfig(**base)  # type: ignore[arg-type]
