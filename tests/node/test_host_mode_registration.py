"""A host process registers its nodes in one message and beats for them on one connection.

A real ``gossip up --nodes-per-process 16`` on grid:4x8 (two host processes of sixteen nodes),
secure (the default) and ``--insecure``, with a real mosquitto: the coordinator's registration
socket takes one RegisterBatch per process (and its re-sends) and no lone Register; while the
nodes gossip, each process holds exactly one connection to the coordinator (its nodes'
lifelines, counted on the operating system's sockets), not one per node; and the run reaches
eps with every final report and its mass exact.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from continuized.cli.entries import NODE_ENTRIES
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.local.launcher import run_up
from continuized.coordinator.local.settings import UpConfig
from continuized.coordinator.run.service import CoordinatorConfig
from tests.system_tools import require_mosquitto

pytestmark = [pytest.mark.cluster, pytest.mark.broker, pytest.mark.timeout(180)]

NODES, PER_PROCESS = 32, 16


async def until(check: Callable[[], bool], what: str, within: float = 90.0) -> None:
    """Wait for ``check()`` (a count in the coordinator's state), failing with ``what``."""
    try:
        async with asyncio.timeout(within):
            while not check():  # noqa: ASYNC110 -- a count in the coordinator's state: no event
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(what) from None


def connections_to(port: int) -> Counter[int]:
    """Established TCP connections to ``port``, by the client's pid (this process excluded)."""
    return Counter(
        c.pid
        for c in psutil.net_connections(kind="tcp")
        if c.raddr
        and c.raddr.port == port
        and c.status == psutil.CONN_ESTABLISHED
        and c.pid is not None
        and c.pid != os.getpid()
    )


@pytest.mark.parametrize("secure", [True, False], ids=["secure", "insecure"])
async def test_each_host_process_registers_its_nodes_in_one_message(
    tmp_path: Path, secure: bool
) -> None:
    require_mosquitto()
    config = UpConfig(
        entries=NODE_ENTRIES,
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
    run = asyncio.ensure_future(run_up(config, lambda state, broker: states.append(state)))
    try:
        await until(
            lambda: (
                bool(states)
                and len(states[0].nodes) == NODES
                and all(v.reports > 0 for v in states[0].nodes.values())
            ),
            "not every node reported",
        )
        said = re.search(
            r"in one batch with tcp://[^:]+:(\d+)", (tmp_path / "host-0.log").read_text()
        )
        assert said is not None
        by_process = connections_to(int(said.group(1)))
        summary = await run
    finally:
        if not run.done():
            run.cancel()
            await asyncio.wait([run], timeout=30)
    # One connection per host process: its nodes' lifelines together (before: one per node).
    assert sorted(by_process.values()) == [1] * (NODES // PER_PROCESS), by_process
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
