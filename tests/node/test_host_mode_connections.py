"""Secure host mode has one MQTT connection per host process, as ``--insecure`` has.

A real ``gossip up --nodes-per-process 4`` on grid:4x4 (four host processes, sixteen nodes),
secure by default, with a real mosquitto: while every node reports, each host process holds
exactly one connection to the broker (counted on the operating system's sockets, client side,
by process) and runs at a lower priority than the coordinator, and the run still reaches eps
with every final report and its mass exact.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from continuized.cli.entries import NODE_ENTRIES
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.local.broker import RunningBroker
from continuized.coordinator.local.launcher import run_up
from continuized.coordinator.local.settings import UpConfig
from continuized.coordinator.machine.children import NODE_NICENESS
from continuized.coordinator.run.service import CoordinatorConfig
from tests.system_tools import require_mosquitto

pytestmark = [pytest.mark.cluster, pytest.mark.broker, pytest.mark.timeout(120)]

NODES, PER_PROCESS = 16, 4


def autogroup(pid: int) -> int | None:
    """The niceness of ``pid``'s autogroup, or None where the kernel has none."""
    try:
        with open(f"/proc/{pid}/autogroup") as group:
            return int(group.read().split("nice")[-1])
    except (OSError, ValueError):
        return None


async def until(check: Callable[[], bool], what: str, within: float = 60.0) -> None:
    """Wait for ``check()`` (a count in the coordinator's state), failing with ``what``."""
    try:
        async with asyncio.timeout(within):
            while not check():  # noqa: ASYNC110 -- a count in the coordinator's state: no event
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(what) from None


def broker_connections(port: int) -> Counter[int]:
    """Established TCP connections to the broker's ``port``, counted by the client's pid
    (this process, the coordinator, excluded)."""
    return Counter(
        c.pid
        for c in psutil.net_connections(kind="tcp")
        if c.raddr
        and c.raddr.port == port
        and c.status == psutil.CONN_ESTABLISHED
        and c.pid is not None
        and c.pid != os.getpid()
    )


async def test_secure_host_mode_has_one_mqtt_connection_per_process_and_reaches_eps(
    tmp_path: Path,
) -> None:
    require_mosquitto()
    config = UpConfig(
        entries=NODE_ENTRIES,
        coordinator=CoordinatorConfig(
            # Slow enough that every node reports a few times before eps.
            graph="grid:4x4",
            algorithm="arg",
            rate=150.0,
            values="onehot",
            until=1e-9,
        ),
        log_dir=tmp_path,
        embedded="mosquitto",
        timeout=90.0,
        nodes_per_process=PER_PROCESS,
    )
    started: dict[str, Any] = {}

    def on_start(state: ClusterState, broker: RunningBroker) -> None:
        started.update(state=state, broker=broker)

    run = asyncio.ensure_future(run_up(config, on_start))
    try:
        await until(lambda: "state" in started or run.done(), "the run did not start")
        state: ClusterState = started["state"]
        broker: RunningBroker = started["broker"]
        assert broker.kind == "mosquitto"
        assert broker.access_controlled
        await until(
            lambda: len(state.nodes) == NODES and all(v.reports > 0 for v in state.nodes.values()),
            "not every node reported over MQTT",
        )
        by_process = broker_connections(broker.port)
        niceness = {pid: psutil.Process(pid).nice() for pid in by_process}
        groups = {pid: autogroup(pid) for pid in by_process}
        summary = await run
    finally:
        if not run.done():
            run.cancel()
            await asyncio.wait([run], timeout=30)
    # Four host processes, one connection each (before: one per node, sixteen).
    assert sorted(by_process.values()) == [1] * (NODES // PER_PROCESS), by_process
    # The nodes yield to the coordinator (this process) and the broker that measure them.
    assert set(niceness.values()) == {os.nice(0) + NODE_NICENESS}, niceness
    # Each leads a session of its own, which Linux may weigh as one (sched_autogroup).
    assert set(groups.values()) <= {None, os.nice(0) + NODE_NICENESS}, groups
    assert summary.stop_reason == "reached"
    assert summary.final_error is not None  # from every final report
    assert summary.missing_finals == ()
    assert summary.mass_drift_rel is not None
    assert summary.mass_drift_rel < 1e-9
