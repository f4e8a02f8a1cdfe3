"""A broker that never comes back: the run still ends, measured, and no node process outlives it.

Every process is real: mosquitto, ``gossip coordinator`` and six ``gossip node`` processes on
loopback. The broker is killed with SIGKILL mid-run and never restarted.

* With ``--broker-deadline``, the coordinator stops the run over the registration channel
  (:mod:`node.lifeline`), takes the final states there, and writes an exact summary whose
  ``failure`` names the broker; every node exits 0.
* With the coordinator killed too, the nodes stop by themselves after ``--orphan-after``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from system_tools import require_mosquitto

from continuized.coordinator.machine.children import spawn, stop_process
from continuized.coordinator.machine.ports import free_port

pytestmark = [pytest.mark.cluster, pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(240)]

GOSSIP = [sys.executable, "-m", "continuized.cli.app"]
NODES = 6


@dataclass
class Deployment:
    broker: asyncio.subprocess.Process
    broker_url: str
    coordinator: asyncio.subprocess.Process
    nodes: list[asyncio.subprocess.Process]
    tmp: Path


@pytest.fixture
async def deployment(tmp_path: Path) -> AsyncIterator[Deployment]:
    """mosquitto, a coordinator (broker deadline 2 s) and six nodes, mid-run; all killed after."""
    mosquitto = require_mosquitto()
    port = free_port("127.0.0.1")
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    broker = await spawn([mosquitto, "-c", str(conf)], log=tmp_path / "mosquitto.log")
    url = f"mqtt://127.0.0.1:{port}"
    bind = f"tcp://127.0.0.1:{free_port('127.0.0.1')}"
    coordinator = await spawn(
        [
            *GOSSIP,
            "coordinator",
            "--graph",
            "grid:2x3",
            "--expect",
            str(NODES),
            "--broker",
            url,
            "--bind",
            bind,
            "--values",
            "onehot",
            "--rate",
            "40",
            "--until",
            "1e-14",  # far: the run is mid-way when the broker dies
            "--broker-deadline",
            "2",
            "--metrics-file",
            str(tmp_path / "run.jsonl"),
            "--json",
            str(tmp_path / "run.json"),
            "--timeout",
            "150",
        ],
        log=tmp_path / "coordinator.log",
    )
    nodes = [
        await spawn(
            [
                *GOSSIP,
                "node",
                "--coordinator",
                bind,
                "--name",
                f"node-{i}",
                "--host",
                "127.0.0.1",
                "--orphan-after",
                "3",
            ],
            log=tmp_path / f"node-{i}.log",
        )
        for i in range(NODES)
    ]
    deployed = Deployment(broker, url, coordinator, nodes, tmp_path)
    try:
        await _wait_points(tmp_path / "run.jsonl", 3, coordinator)
        yield deployed
    finally:
        for proc in [*nodes, coordinator, deployed.broker]:
            await stop_process(proc)


def _points(metrics: Path) -> int:
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    return [json.loads(line).get("kind") for line in lines if line.strip()].count("point")


async def _wait_points(metrics: Path, points: int, coordinator: asyncio.subprocess.Process) -> None:
    """Wait until the coordinator has measured ``points`` errors of the running run."""
    async with asyncio.timeout(120):
        while True:
            if _points(metrics) >= points:
                return
            assert coordinator.returncode is None, "the coordinator ended before the run started"
            await asyncio.sleep(0.05)


async def _kill_broker(deployed: Deployment) -> None:
    deployed.broker.send_signal(signal.SIGKILL)  # and it never comes back
    await deployed.broker.wait()


async def test_the_coordinator_stops_the_run_over_curve_channel_and_measures_it(
    deployment: Deployment,
) -> None:
    await _kill_broker(deployment)
    async with asyncio.timeout(60):
        code = await deployment.coordinator.wait()
    log = (deployment.tmp / "coordinator.log").read_text()
    assert code == 1, log[-3000:]  # eps not reached: a failure, said as one
    record = json.loads((deployment.tmp / "run.json").read_text())
    assert record["stop_reason"] == "broker-lost"
    assert record["failure"].startswith(f"lost the broker {deployment.broker_url}"), record
    # Every final state came over the registration channel: the figures are measured.
    assert record["missing_finals"] == []
    assert record["complete"] is True
    assert record["mass_drift_rel"] is not None
    assert record["mass_drift_rel"] <= 1e-9
    assert record["final_error"] is not None
    assert "lost the broker" in log
    async with asyncio.timeout(60):  # no node outlives its run
        codes = [await node.wait() for node in deployment.nodes]
    assert codes == [0] * NODES
    for i in range(NODES):
        text = (deployment.tmp / f"node-{i}.log").read_text()
        assert "the coordinator stopped the run (broker-lost)" in text, text[-2000:]


async def test_nodes_that_lose_broker_and_coordinator_stop_by_themselves(
    deployment: Deployment,
) -> None:
    deployment.coordinator.send_signal(signal.SIGKILL)
    await deployment.coordinator.wait()
    await _kill_broker(deployment)
    async with asyncio.timeout(60):  # --orphan-after 3, then a clean stop
        codes = [await node.wait() for node in deployment.nodes]
    assert codes == [0] * NODES
    for i in range(NODES):
        text = (deployment.tmp / f"node-{i}.log").read_text()
        assert "nobody can stop or measure this node any more" in text, text[-2000:]
