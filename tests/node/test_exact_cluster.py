"""Exact mode in a whole cluster over the in-memory transport, under drop/dup/delay faults."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from _nodetest import bootstraps, common_time

from node import FakeNetwork, FaultSpec, FaultyTransport, Node, Transport


@pytest.mark.parametrize("hold", [False, True], ids=["free", "hold"])
async def test_corrections_keep_the_mass_exact_under_faults(hold: bool) -> None:
    values = np.random.default_rng(5).normal(size=(8, 1))
    net = FakeNetwork()
    addresses = [f"mem://node-{v}" for v in range(8)]
    boots = bootstraps("line:8", "arg", 300.0, time.time() + 0.2, values, addresses)
    faults = FaultSpec(drop=0.1, dup=0.1, delay=0.2, delay_ms=3.0)
    nodes = []
    for v, boot in enumerate(boots):
        transport: Transport = FaultyTransport(net.endpoint(addresses[v]), faults, seed=v)
        nodes.append(
            Node(
                boot,
                transport,
                timeout=0.05,
                max_timeout=0.4,
                drain=0.5,
                linger=0.5,
                seed=v,
                hold=hold,
                exact=True,
            )
        )
    async with asyncio.TaskGroup() as tg:
        runs = [tg.create_task(node.run(), name=f"node-{v}") for v, node in enumerate(nodes)]
        await asyncio.sleep(2.2)
        for node in nodes:
            node.request_stop()
    assert [run.result() for run in runs] == [0] * 8
    final = [node.final for node in nodes]
    assert all(r is not None and r["final"] for r in final)
    reports = [r for r in final if r is not None]
    _, x = common_time(reports, nodes[0].boot.eta)
    # Mass: exact to rounding, whatever was lost, repeated or late (corrections included).
    assert abs(x.sum() - values.sum()) <= 1e-9 * np.abs(values).sum()
    counters = [r["counters"] for r in reports]
    assert sum(c["corrections"] for c in counters) > 0  # delays made stale jumps: corrected
    assert sum(c["retried"] for c in counters) > 0
    assert sum(c["duplicates"] for c in counters) > 0
    assert sum(c["rejected"] for c in counters) == 0
