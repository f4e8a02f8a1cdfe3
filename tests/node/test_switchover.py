"""Nodes follow membership views: in-process clusters over the in-memory transport.

The view command is handed to each node as the MQTT link would (``on_command``): the leaver
stops, the others switch at T_e. Survivors' final states must sum to their initial sum to
1e-9 and converge to their own mean, with and without lost, repeated and delayed frames.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from _nodetest import bootstraps, common_time

from continuized.gossip.exchange.membership import first_view, leave_view
from continuized.gossip.graph.topology import parse_topology
from continuized.node import FakeNetwork, FaultSpec, FaultyTransport, Node, Transport


async def _served_at_least(nodes: list[Node], count: int, within: float) -> None:
    async with asyncio.timeout(within):
        while True:
            if sum(node.exchanger.counters.served for node in nodes) >= count:
                return
            await asyncio.sleep(0.02)


@pytest.mark.parametrize(
    "faults",
    [FaultSpec(), FaultSpec(drop=0.1, dup=0.1, delay=0.1, delay_ms=2.0)],
    ids=["clean", "faults"],
)
async def test_a_leaver_stops_and_the_survivors_converge_to_their_own_mean(
    faults: FaultSpec,
) -> None:
    spec, rate, leaver = "line:6", 200.0, 5
    topo = parse_topology(spec)
    values = np.random.default_rng(4).normal(size=(topo.n, 1))
    values[leaver] += 5.0  # far from the others: its share must leave with it
    net = FakeNetwork()
    addresses = [f"mem://node-{v}" for v in range(topo.n)]
    epoch = time.time() + 0.2
    boots = bootstraps(spec, "arg", rate, epoch, values, addresses)
    nodes = []
    for v, boot in enumerate(boots):
        transport: Transport = net.endpoint(addresses[v])
        if faults.active:
            transport = FaultyTransport(transport, faults, seed=v)
        nodes.append(
            Node(boot, transport, timeout=0.05, max_timeout=0.4, drain=0.3, linger=5.0, seed=v)
        )
    view0 = first_view(topo.n, [(int(u), int(v)) for u, v in topo.edges])
    async with asyncio.TaskGroup() as tg:
        runs = [tg.create_task(node.run(), name=f"node-{v}") for v, node in enumerate(nodes)]
        await _served_at_least(nodes, 150, within=30)
        t_e = rate * (time.time() + 0.3 - epoch)
        view1 = leave_view(view0, leaver, t_e)
        command = {"cmd": "view", "epoch": epoch, "view": view1.as_dict()}
        for node in nodes:
            node.membership.on_command({**command, "epoch": epoch + 1.0})  # another run's
            assert node.membership.number == 0
            assert node.exchanger.horizon == np.inf
            node.membership.on_command(command)
            node.membership.on_command(command)  # a repeat: ignored
        assert nodes[leaver].membership.left
        survivors = [node for v, node in enumerate(nodes) if v != leaver]
        await _served_at_least(survivors, 1500, within=60)
        assert all(node.membership.number == 1 for node in survivors)
        for node in nodes:
            node.request_stop()
    assert [run.result() for run in runs] == [0] * topo.n
    final = [node.final for node in survivors]
    assert all(r is not None and r["final"] for r in final)
    t, x = common_time([r for r in final if r is not None], view1.eta)
    assert t > t_e
    kept = np.delete(values, leaver, axis=0)
    assert abs(x.sum() - kept.sum()) <= 1e-9 * np.abs(kept).sum()
    error = 0.5 * float(np.sum((x - kept.mean()) ** 2))
    assert error < 1e-6 * 0.5 * float(np.sum((kept - kept.mean()) ** 2))


def test_a_view_announced_before_the_switch_to_the_previous_one_still_bounds_it() -> None:
    # Two deaths a moment apart: view 2 comes before the node switched to view 1. The switch
    # to view 1 must leave the horizon at view 2's start, or the node jumps past it in view 1.
    spec, rate = "complete:4", 10.0
    topo = parse_topology(spec)
    epoch = time.time() + 60.0
    values = np.arange(topo.n, dtype=float).reshape(topo.n, 1)
    boots = bootstraps(spec, "arg", rate, epoch, values, [f"mem://n{v}" for v in range(topo.n)])
    node = Node(boots[0], FakeNetwork().endpoint("mem://n0"), seed=0)
    view0 = first_view(topo.n, [(int(u), int(v)) for u, v in topo.edges])
    view1 = leave_view(view0, 2, 5.0)
    view2 = leave_view(view1, 3, 8.0)
    for view in (view1, view2):
        node.membership.on_command({"cmd": "view", "epoch": epoch, "view": view.as_dict()})
    assert node.exchanger.horizon == view2.start
    node.membership.switch(view1)
    assert node.membership.number == 1
    assert node.exchanger.horizon == view2.start
    node.membership.switch(view2)
    assert node.exchanger.horizon == np.inf
