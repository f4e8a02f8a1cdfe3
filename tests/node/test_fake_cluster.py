"""Whole clusters in one process over the in-memory transport, with and without faults."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from _nodetest import bootstraps, common_time, gossip_then_stop

from continuized.node import FakeNetwork, FaultSpec, FaultyTransport, Node, Transport


async def run_cluster(
    spec: str,
    algorithm: str,
    rate: float,
    seconds: float,
    faults: FaultSpec,
    dim: int = 1,
) -> tuple[list[Node], np.ndarray]:
    rng = np.random.default_rng(11)
    n = int(spec.split(":")[1].split("x")[0]) ** (2 if "grid" in spec else 1)
    values = rng.normal(size=(n, dim))
    net = FakeNetwork()
    addresses = [f"mem://node-{v}" for v in range(n)]
    boots = bootstraps(spec, algorithm, rate, time.time() + 0.2, values, addresses)
    nodes = []
    for v, boot in enumerate(boots):
        transport: Transport = net.endpoint(addresses[v])
        if faults.active:
            transport = FaultyTransport(transport, faults, seed=v)
        nodes.append(
            Node(boot, transport, timeout=0.05, max_timeout=0.4, drain=0.3, linger=5.0, seed=v)
        )
    async with asyncio.TaskGroup() as tg:
        runs = [tg.create_task(node.run(), name=f"node-{v}") for v, node in enumerate(nodes)]
        await gossip_then_stop(nodes, int(rate * seconds), deadline=0.2 + 10 * seconds)
    assert [run.result() for run in runs] == [0] * n
    return nodes, values


@pytest.mark.parametrize(
    "faults",
    [FaultSpec(), FaultSpec(drop=0.1, dup=0.1, delay=0.1, delay_ms=2.0)],
    ids=["clean", "faults"],
)
async def test_cluster_reaches_the_exact_average_with_mass_conserved(faults: FaultSpec) -> None:
    nodes, values = await run_cluster("cycle:8", "arg", rate=200.0, seconds=3.0, faults=faults)
    reports = [node.final for node in nodes]
    assert all(r is not None and r["final"] for r in reports)
    final = [r for r in reports if r is not None]
    eta = nodes[0].boot.eta
    t, x = common_time(final, eta)
    assert t > 500  # 600 activations at about 200 per second
    mean = values.mean(axis=0)
    total_initial = np.abs(values).sum()
    assert abs(x.sum() - values.sum()) <= 1e-9 * total_initial  # mass, 1e-9 relative
    error = 0.5 * float(np.sum((x - mean) ** 2))
    start = 0.5 * float(np.sum((values - mean) ** 2))
    assert error < 1e-8 * start
    counters = [r["counters"] for r in final]
    initiated = sum(c["initiated"] for c in counters)
    served = sum(c["served"] for c in counters)
    failed = sum(c["failed"] for c in counters)
    bounced = sum(c["bounced"] for c in counters)
    assert served >= 200.0 * 3.0  # the jumps asked for were made
    assert served == initiated - failed - bounced  # refused ones were never applied
    assert sum(c["rejected"] for c in counters) == 0
    if faults.active:
        assert sum(c["retried"] for c in counters) > 0
        assert sum(c["duplicates"] for c in counters) > 0
    for r in final:  # each edge's activation counts agree at both ends
        for peer, count in r["edges"].items():
            assert final[int(peer)]["edges"][str(r["node"])] == count
    for r in final:  # one process, one clock: each bound on a neighbour's offset holds 0
        clock, rtt = r["clock"], r["rtt_ms"]
        assert clock is not None
        assert clock["samples"] > 0
        assert str(clock["peer"]) in r["edges"]
        assert abs(clock["offset"]) <= clock["error"] + 1e-9
        assert rtt["p5"] is not None
        assert 0 < rtt["p5"] <= rtt["p50"] <= rtt["p99"]


async def test_vector_values_average_componentwise() -> None:
    nodes, values = await run_cluster(
        "line:4", "rg", rate=300.0, seconds=1.5, faults=FaultSpec(), dim=3
    )
    final = [node.final for node in nodes]
    _, x = common_time([r for r in final if r is not None], 0.0)
    np.testing.assert_allclose(x.sum(axis=0), values.sum(axis=0), rtol=1e-9)
    np.testing.assert_allclose(x, np.broadcast_to(values.mean(axis=0), x.shape), atol=1e-6)
