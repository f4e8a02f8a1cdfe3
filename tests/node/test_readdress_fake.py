"""A node killed mid-run and started again on another address, in one process over the
in-memory transport: its neighbours follow it there, and the sums stay exact.

The old incarnation's task is cancelled between two frames and its endpoint removed (what
SIGKILL leaves: nothing answers there any more); the new one has the same bootstrap and a new
address, and recovers. The test waits for counts (jumps served at the new address), not seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np
from _nodetest import bootstraps, common_time

from continuized.gossip.wire.schema import Bootstrap
from continuized.node import FakeNetwork, FaultSpec, FaultyTransport, Node, Transport

FAULTS = FaultSpec(drop=0.05, dup=0.05, delay=0.05, delay_ms=2.0)


async def until(check: Callable[[], bool], what: str, within: float = 60.0) -> None:
    """Wait for ``check()`` (a count in the nodes' counters), failing with ``what``."""
    try:
        async with asyncio.timeout(within):
            while not check():  # noqa: ASYNC110 -- counters of in-process nodes: no event
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(what) from None


def node(net: FakeNetwork, boot: Bootstrap, address: str, seed: int, recover: bool = False) -> Node:
    """A node at ``address`` on ``net``, under loss, duplication and delay."""
    transport: Transport = FaultyTransport(net.endpoint(address), FAULTS, seed=seed)
    return Node(
        boot,
        transport,
        timeout=0.05,
        max_timeout=0.4,
        drain=0.3,
        linger=0.5,
        seed=seed,
        recover=recover,
    )


async def test_neighbours_follow_a_restarted_node_to_its_new_address() -> None:
    values = np.array([[0.0], [3.0], [9.0], [-4.0]])
    net = FakeNetwork()
    addresses = [f"mem://node-{v}" for v in range(4)]
    boots = bootstraps("line:4", "arg", 300.0, time.time() + 0.2, values, addresses)
    nodes = [node(net, boots[v], addresses[v], v) for v in range(4)]
    async with asyncio.TaskGroup() as tg:
        runs = [tg.create_task(n.run(), name=f"node-{v}") for v, n in enumerate(nodes)]
        await until(lambda: nodes[1].exchanger.counters.served >= 30, "node 1 never served")
        runs[1].cancel()  # kill -9: between two frames, no goodbye
        net.remove(addresses[1])
        old = nodes[1]
        nodes[1] = node(net, boots[1], "mem://node-1-moved", 11, recover=True)
        runs[1] = tg.create_task(nodes[1].run(), name="node-1-again")
        # The neighbours' requests reach it at its new address: it serves them.
        await until(
            lambda: nodes[1].exchanger.counters.served >= 30,
            "the neighbours never reached node 1 at its new address",
        )
        await until(lambda: sum(n.exchanger.counters.served for n in nodes) >= 900, "stalled")
        for n in nodes:
            n.request_stop()
    finals = [n.final for n in nodes]
    assert all(r is not None for r in finals)
    reports = [r for r in finals if r is not None]
    assert reports[1]["address"] == "mem://node-1-moved"
    assert old.exchanger.counters.moved == 0
    assert [r["counters"]["moved"] for r in reports] == [1, 0, 1, 0]  # node 1's neighbours
    assert reports[1]["counters"]["rejected"] == 0
    _, x = common_time(reports, boots[0].eta)
    assert abs(float(x.sum()) - float(values.sum())) <= 1e-9 * float(np.abs(values).sum())
    np.testing.assert_allclose(x.ravel(), values.mean(), atol=1e-3)
