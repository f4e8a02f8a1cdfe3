"""Two nodes frozen at once (SIGSTOP: alive but silent, like a host whose cable was pulled)
are declared dead in the same coordinator tick: views 1 and 2 start a nanosecond apart, and
the survivors must still end on the mean of their own initial values, exactly.

The exact failure seen on a real cut link (a reply to a released exchange, answered after
both switches, was dropped) is rare on loopback; the sans-IO replay that pins it is
tests/gossip/exchange/test_membership_exchange.py. This test checks the whole path: two deaths,
two views in one tick, every survivor switching through both.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from _churn import churn_config, kill_left, stop_once_reached, until
from test_churn_live import spawn_node

from continuized.coordinator.local.broker import RunningBroker
from continuized.coordinator.run.service import Coordinator

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.solo, pytest.mark.timeout(300)]


async def test_two_nodes_frozen_together_are_dead_in_one_tick_and_the_survivors_keep_their_mean(
    mosquitto: RunningBroker, tmp_path: Path
) -> None:
    config = churn_config(
        mosquitto, tmp_path, graph="complete:6", rate=10.0, dead_after=2.0, until=1e-10
    )
    coord = Coordinator(config)
    procs = []
    try:
        async with asyncio.TaskGroup() as tg:
            run = tg.create_task(coord.run())
            await coord.bound.wait()
            for k in range(6):
                procs.append(await spawn_node(config.bind, f"n{k}", tmp_path / f"n{k}.log"))
            await until(lambda: coord.state.activations() > 60, 120)
            for k in (2, 3):  # in one go: silent from the same moment
                os.kill(procs[k].pid, signal.SIGSTOP)
            await until(lambda: len(coord.state.departed) == 2, 60)
            summary = await stop_once_reached(coord, run)
    finally:
        for p in procs:
            if p.returncode is None:
                os.kill(p.pid, signal.SIGCONT)  # a stopped process still dies of SIGKILL; tidy
        kill_left(procs)
    assert summary is not None
    assert summary.reached, coord.state.message
    state = coord.state
    assert state.departed == {2, 3}
    deaths = [e for e in state.churn if e["kind"] == "dead"]
    assert [e["view"] for e in deaths] == [1, 2]
    assert state.final is not None, state.message
    assert state.final.complete, state.message
    values = np.array(state.final.values)
    assert values.shape[0] == 4
    # onehot: node 0 holds 1 and survives; the survivors' initial sum is 1, their mean 1/4.
    assert abs(values.sum() - 1.0) <= 1e-9
    assert np.allclose(values, 1 / 4, atol=1e-3)
