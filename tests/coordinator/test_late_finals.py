"""Final reports that come later than ``stop_timeout`` after the stop, real processes.

A loaded cluster of a thousand nodes hears the stop seconds late and then settles (each node
waits for its exchanges in flight): its final reports came after the coordinator's fixed
10 s, and the summary lost them all. Here the nodes of a secure host-mode run (line:8, two
processes of four) settle for ``--drain 11`` seconds, past the coordinator's ``stop_timeout``
plus the 8.5 s it allows the nodes to settle: hearing them report meanwhile, it waits on and
takes every final report.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from continuized.cli.entries import NODE_ENTRIES
from continuized.coordinator.local.launcher import run_up
from continuized.coordinator.local.settings import UpConfig
from continuized.coordinator.run.service import CoordinatorConfig

pytestmark = [pytest.mark.cluster, pytest.mark.broker, pytest.mark.timeout(240)]

_STOP_TIMEOUT = 1.5  # seconds of silence the coordinator waits for final reports
_DRAIN = 11.0  # seconds each node settles: past the coordinator's 1.5 + 8.5 s


async def test_finals_later_than_the_stop_timeout_are_taken_while_nodes_report(
    tmp_path: Path,
) -> None:
    config = UpConfig(
        entries=NODE_ENTRIES,
        coordinator=CoordinatorConfig(
            graph="line:8",
            algorithm="arg",
            rate=50.0,
            values="onehot",
            until=1e-12,
            run_timeout=3.0,
            stop_timeout=_STOP_TIMEOUT,
        ),
        log_dir=tmp_path,
        embedded="mosquitto",
        timeout=150.0,
        nodes_per_process=4,
        node_args=("--drain", str(_DRAIN), "--linger", "2"),
    )
    summary = await asyncio.wait_for(run_up(config), 200)
    assert summary.stop_reason in ("reached", "timeout")
    assert summary.missing_finals == ()
    assert summary.finals_wait_s is not None
    assert summary.finals_wait_s > _DRAIN > _STOP_TIMEOUT  # later than a fixed deadline
    assert summary.mass_drift_rel is not None  # measured: every final report came
    assert summary.mass_drift_rel < 1e-9
    assert (summary.members, summary.reported) == (8, 8)
    assert summary.rate_achieved is not None
