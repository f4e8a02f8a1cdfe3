"""A secure host process registers its nodes in one message, as ``--insecure`` does.

A real ``gossip up --nodes-per-process 16`` on grid:4x8 (two host processes of sixteen nodes),
secure by default, with a real mosquitto: the coordinator's registration socket takes one
RegisterBatch per process (and its re-sends) and no lone Register, and the run reaches eps
with every final report and its mass exact.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coordinator.launcher import UpConfig, run_up
from coordinator.service import CoordinatorConfig
from coordinator.state import ClusterState
from tests.system_tools import require_mosquitto

pytestmark = [pytest.mark.cluster, pytest.mark.broker, pytest.mark.timeout(180)]

NODES, PER_PROCESS = 32, 16


@pytest.mark.parametrize("secure", [True, False], ids=["secure", "insecure"])
async def test_each_host_process_registers_its_nodes_in_one_message(
    tmp_path: Path, secure: bool
) -> None:
    require_mosquitto()
    config = UpConfig(
        coordinator=CoordinatorConfig(
            graph="grid:4x8", algorithm="arg", rate=400.0, values="onehot", until=1e-6
        ),
        log_dir=tmp_path,
        embedded="mosquitto",
        timeout=120.0,
        nodes_per_process=PER_PROCESS,
        secure=secure,
    )
    states: list[ClusterState] = []
    summary = await run_up(config, lambda state, broker: states.append(state))
    lone, batches = states[0].register_messages
    assert lone == 0
    # One batch per process, and a process re-sends its batch every 2 s until the bootstrap:
    # at least 2, and far fewer than one per node (32, plus their re-sends) on a slow start.
    processes = NODES // PER_PROCESS
    assert processes <= batches < NODES, batches
    logs = [(tmp_path / f"host-{j}.log").read_text() for j in range(processes)]
    assert all("registering 16 nodes in one batch" in log for log in logs)
    assert not any("one by one" in log for log in logs)
    assert summary.stop_reason == "reached"
    assert summary.missing_finals == ()
    assert summary.mass_drift_rel is not None
    assert summary.mass_drift_rel < 1e-9
