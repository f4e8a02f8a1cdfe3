"""Host mode: real ``gossip node --nodes-per-process K`` processes on loopback."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiomqtt
import numpy as np
import pytest
import zmq
from _nodetest import FakeCoordinator, bootstraps, common_time, kill_all, spawn_node

from continuized.coordinator.local.broker import RunningBroker
from continuized.gossip.errors import ConfigError
from continuized.node.config import NodeConfig, host_configs
from continuized.node.host import _node

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

N, K = 8, 4  # line:8 as 2 host processes of 4 nodes
VALUES = [float(v) for v in (0, 5, 1, 8, 2, 7, 3, 6)]


async def host_reports(proc: asyncio.subprocess.Process, within: float = 60.0) -> list[Any]:
    """Wait for a host process to exit 0; return the final reports it printed, one a line."""
    async with asyncio.timeout(within):
        out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
    reports = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert all(r["final"] is True for r in reports)
    return reports


def free_ports(count: int) -> int:
    """A port P such that P .. P+count-1 were free just now (for fixed, restartable binds)."""
    for _ in range(50):
        with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as probe:
            base = probe.bind_to_random_port("tcp://127.0.0.1", min_port=20000, max_port=60000)
        try:
            with zmq.Context() as ctx:
                socks = [ctx.socket(zmq.ROUTER) for _ in range(count)]
                try:
                    for i, sock in enumerate(socks):
                        sock.bind(f"tcp://127.0.0.1:{base + i}")
                finally:
                    for sock in socks:
                        sock.close(0)
            return base
        except zmq.ZMQError:
            continue
    raise AssertionError("no run of free ports")


def host_args(base_port: int | None, first: int) -> list[str]:
    """Options of a host of K nodes: a fixed port range (restartable) or any free ports."""
    bind = ["--bind", f"tcp://127.0.0.1:{base_port}", "--advertise", "127.0.0.1"]
    return [
        *(bind if base_port else ["--host", "127.0.0.1"]),
        "--nodes-per-process",
        str(K),
        "--retry-timeout",
        "0.05",
        "--seed",
        str(first),
    ]


@pytest.mark.broker
async def test_two_hosts_of_four_nodes_converge_with_exact_mass(
    tmp_path: Path, mosquitto: RunningBroker
) -> None:
    values = np.array(VALUES)
    coordinator = FakeCoordinator(
        "line:8", "arg", rate=400.0, values=values, broker=mosquitto.url, start_in=0.3
    )
    procs = []
    try:
        for host, first in (("a", 0), ("b", K)):
            procs.append(
                await spawn_node(
                    coordinator.address, host, tmp_path / f"{host}.log", *host_args(None, first)
                )
            )
        async with asyncio.timeout(60):
            boots = await coordinator.bootstrap(N)
        # Two processes registered eight names (a-0..a-3, b-0..b-3), each its own address.
        assert sorted(coordinator.registers) == [f"{h}-{i}" for h in "ab" for i in range(K)]
        assert len({r.address for r in coordinator.registers.values()}) == N
        assert len({r.pid for r in coordinator.registers.values()}) == 2
        # Each process reports its four nodes, each on its own topic, over its one connection:
        # gossip until they say they have started enough exchanges (a count, not a duration).
        latest: dict[int, dict[str, Any]] = {}
        async with aiomqtt.Client(mosquitto.host, mosquitto.port) as client:
            await client.subscribe("gossip/test/node/+/state")
            async with asyncio.timeout(120):
                async for message in client.messages:
                    assert isinstance(message.payload, bytes)
                    report = json.loads(message.payload)
                    assert message.topic.value == f"gossip/test/node/{report['node']}/state"
                    latest[report["node"]] = report
                    initiated = sum(r["counters"]["initiated"] for r in latest.values())
                    if len(latest) == N and initiated >= 1600:
                        break
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        reports = [r for proc in procs for r in await host_reports(proc)]
    finally:
        kill_all(procs)
        coordinator.close()
    # Nodes of one process talk over real sockets too: every edge was activated.
    assert all(all(n > 0 for n in r["edges"].values()) for r in reports)
    _, x = common_time(reports, boots[0].eta)
    assert abs(float(x.sum()) - values.sum()) <= 1e-9 * np.abs(values).sum()
    # Converging: after 1,600 activations the spread is well below the initial one (8).
    assert float(np.ptp(x)) < 0.5


async def wait_for_reports(
    client: aiomqtt.Client, enough: Callable[[dict[int, dict[str, Any]]], bool], within: float
) -> dict[int, dict[str, Any]]:
    """Read state reports until ``enough(latest report of each node)``; return them."""
    latest: dict[int, dict[str, Any]] = {}
    async with asyncio.timeout(within):
        async for message in client.messages:
            assert isinstance(message.payload, bytes)
            report = json.loads(message.payload)
            latest[report["node"]] = report
            if enough(latest):
                return latest
    raise AssertionError("unreachable")


def all_gossiping(latest: dict[int, dict[str, Any]]) -> bool:
    """Every node has reported, each with a few exchanges started."""
    return len(latest) == N and all(r["counters"]["initiated"] > 20 for r in latest.values())


@pytest.mark.broker
async def test_a_killed_host_restarts_and_recovers_its_nodes_exactly(
    tmp_path: Path, mosquitto: RunningBroker
) -> None:
    values = np.array(VALUES)
    coordinator = FakeCoordinator(
        "line:8", "arg", rate=300.0, values=values, broker=mosquitto.url, start_in=0.3
    )
    ports = [free_ports(K), free_ports(K)]
    procs: list[asyncio.subprocess.Process] = []
    log = tmp_path / "hosts.log"
    try:
        for host, first in (("a", 0), ("b", 1)):
            procs.append(
                await spawn_node(coordinator.address, host, log, *host_args(ports[first], first))
            )
        async with asyncio.timeout(60):
            boots = await coordinator.bootstrap(N)
        b_ids = {boot.node_id for name, boot in coordinator.boots.items() if name[0] == "b"}
        async with aiomqtt.Client(mosquitto.host, mosquitto.port) as client:
            await client.subscribe("gossip/test/node/+/state")
            async with asyncio.TaskGroup() as tg:
                server = tg.create_task(coordinator.serve(), name="fake-coordinator")
                # Every node gossiping, then SIGKILL host b and its 4 nodes, mid-exchange.
                await wait_for_reports(
                    client,
                    lambda r: (
                        len(r) == N and all(v["counters"]["initiated"] > 20 for v in r.values())
                    ),
                    90,
                )
                procs[1].kill()
                await procs[1].wait()
                restart = time.time()
                procs[1] = await spawn_node(coordinator.address, "b", log, *host_args(ports[1], 1))
                # The new incarnation's nodes report (from scratch) after recovering.
                await wait_for_reports(
                    client,
                    lambda r: all(
                        k in r and r[k]["wall"] > restart and r[k]["counters"]["initiated"] > 20
                        for k in b_ids
                    ),
                    90,
                )
                for proc in procs:
                    proc.send_signal(signal.SIGTERM)
                reports = [r for proc in procs for r in await host_reports(proc)]
                server.cancel()
    finally:
        kill_all(procs)
        coordinator.close()
    assert sorted(coordinator.reregistered) == [f"b-{i}" for i in range(K)]
    _, x = common_time(reports, boots[0].eta)
    # Recovered exactly: the sum of the values is the initial sum, to rounding.
    assert abs(float(x.sum()) - values.sum()) <= 1e-9 * np.abs(values).sum()


def test_host_configs_name_bind_and_seed_each_node() -> None:
    base = NodeConfig("tcp://127.0.0.1:5555", name="h", bind="tcp://127.0.0.1:7000", seed=3)
    configs = host_configs(base, 3)
    assert [c.name for c in configs] == ["h-0", "h-1", "h-2"]
    assert [c.bind for c in configs] == [f"tcp://127.0.0.1:{7000 + i}" for i in range(3)]
    assert [c.seed for c in configs] == [3, 4, 5]
    assert host_configs(base, 1) == [base]  # one node: as given
    anyport = NodeConfig("tcp://127.0.0.1:5555", name="h", bind="tcp://0.0.0.0:0")
    assert {c.bind for c in host_configs(anyport, 4)} == {"tcp://0.0.0.0:0"}
    with pytest.raises(ConfigError, match="nodes-per-process"):
        host_configs(base, 0)
    high = NodeConfig("tcp://127.0.0.1:5555", name="h", bind="tcp://127.0.0.1:65535")
    with pytest.raises(ConfigError, match="65535"):
        host_configs(high, 2)


async def test_a_node_built_after_the_epoch_from_a_bootstrap_that_came_before_is_fresh() -> None:
    """4,096 nodes on two cores: a process built its last nodes seconds after t = 0. Their
    Bootstrap came before it, so they are fresh nodes, not restarted ones asking their
    neighbours for ledgers; a Bootstrap that came after t = 0 is a restart's."""
    epoch = time.time() - 2.0  # t = 0 was 2 s ago: the node is built late
    boot = bootstraps("line:2", "arg", 100.0, epoch, np.zeros(2), ["tcp://127.0.0.1:1"] * 2)[0]
    config = NodeConfig("tcp://127.0.0.1:5555", name="h-0")

    class Quiet:  # the node is only built here, never run: its transport is never used
        address = "tcp://127.0.0.1:7000"

    stop = asyncio.Event()
    fresh = _node(config, boot, Quiet(), stop, received=epoch - 0.5)  # type: ignore[arg-type]
    assert not fresh.restarted
    back = _node(config, boot, Quiet(), stop, received=epoch + 0.5)  # type: ignore[arg-type]
    assert back.restarted
