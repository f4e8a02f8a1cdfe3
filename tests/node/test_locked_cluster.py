"""Whole clusters with the lock (one exchange per node at a time), over the in-memory transport."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from _nodetest import bootstraps, common_time, gossip_then_stop

from continuized.node import FakeNetwork, FaultSpec, FaultyTransport, Node, Transport


@pytest.mark.parametrize(
    "faults",
    [FaultSpec(), FaultSpec(drop=0.1, dup=0.1, delay=0.1, delay_ms=2.0)],
    ids=["clean", "faults"],
)
async def test_locked_nodes_reach_the_exact_average_without_dropping_ticks(
    faults: FaultSpec, caplog: pytest.LogCaptureFixture
) -> None:
    n, rate, seconds = 8, 200.0, 3.0
    values = np.random.default_rng(5).normal(size=(n, 1))
    net = FakeNetwork()
    addresses = [f"mem://lock-{v}" for v in range(n)]
    boots = bootstraps(f"cycle:{n}", "arg", rate, time.time() + 0.2, values, addresses)
    nodes = []
    for v, boot in enumerate(boots):
        transport: Transport = net.endpoint(addresses[v])
        if faults.active:
            transport = FaultyTransport(transport, faults, seed=v)
        node = Node(boot, transport, timeout=0.05, max_timeout=0.4, drain=0.3, linger=5.0, seed=v)
        nodes.append(node)
    async with asyncio.TaskGroup() as tg:
        runs = [tg.create_task(node.run(), name=f"lock-{v}") for v, node in enumerate(nodes)]
        await gossip_then_stop(nodes, int(rate * seconds), deadline=0.2 + 10 * seconds)
    assert [run.result() for run in runs] == [0] * n
    final = [node.final for node in nodes if node.final is not None]
    assert len(final) == n
    _t, x = common_time(final, nodes[0].boot.eta)
    mean = values.mean(axis=0)
    assert abs(x.sum() - values.sum()) <= 1e-9 * np.abs(values).sum()
    counters = [r["counters"] for r in final]
    initiated = sum(c["initiated"] for c in counters)
    bounced = sum(c["bounced"] for c in counters)
    error = 0.5 * float(np.sum((x - mean) ** 2))
    start = 0.5 * float(np.sum((values - mean) ** 2))
    assert error < 1e-8 * start, f"error {error:.3g} of {start:.3g} after {initiated} activations"
    served = sum(c["served"] for c in counters)
    assert served > 0.8 * rate * seconds
    assert served == initiated - bounced - sum(c["failed"] for c in counters)
    # Every node parted from its neighbours (gossip.exchange.parting) instead of timing out: that is
    # what keeps the identity above exact when a reply is lost as the nodes stop.
    assert "without every neighbour's goodbye" not in caplog.text
    assert sum(c["refused"] for c in counters) >= bounced
    # Contention happened, and was resolved: requests waited for engaged nodes, and nodes that
    # asked each other at once were both served (gossip.exchange.crossing).
    assert sum(c["deferred"] for c in counters) > 0
    assert sum(c["crossed"] for c in counters) > 0
    if not faults.active:
        # Ticks wait for the lock, or are tried again after a refusal: none is dropped while
        # running (stopping drops what is still owed, counted as skipped).
        assert sum(c["released"] for c in counters) == 0
