"""Real ``gossip node`` processes on loopback, against a tiny coordinator written here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq
import zmq.asyncio
from _nodetest import FakeCoordinator, common_time, final_report, kill_all, spawn_node

from continuized.gossip.wire.schema import Request, encode

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

VALUES = [0.0, 3.0, 9.0]


def check_exact_average(
    reports: list[dict[str, Any]], values: list[float], eta: float, atol: float = 1e-9
) -> None:
    """Mass conserved to 1e-9 relative at a common t; every x within ``atol`` of the mean."""
    _, x = common_time(reports, eta)
    assert abs(float(x.sum()) - sum(values)) <= 1e-9 * sum(abs(v) for v in values)
    np.testing.assert_allclose(x.ravel(), np.mean(values), rtol=0, atol=atol)


async def test_three_processes_converge_and_count_bad_frames(tmp_path: Path) -> None:
    coordinator = FakeCoordinator("line:3", "arg", rate=300.0, start_in=0.3)
    procs = []
    try:
        for k, value in enumerate(VALUES):
            procs.append(
                await spawn_node(
                    coordinator.address,
                    f"n{k}",
                    tmp_path / f"n{k}.log",
                    "--host",
                    "127.0.0.1",
                    "--value",
                    str(value),
                    "--seed",
                    str(k),
                )
            )
        async with asyncio.timeout(60):
            boots = await coordinator.bootstrap(3)
        target = coordinator.registers["n0"].address
        await asyncio.sleep(1.5)
        # Garbage at node 0's ROUTER, from a socket it does not know.
        ctx = zmq.asyncio.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 1000)
        dealer.connect(target)
        good = dict(src=1, edge=0, seq=10**6, ack=0, t=1.0, u=(1.0,))
        bad_frames = [
            b"garbage",
            msgpack.packb({"v": 1, "type": "request", **good}),  # the old protocol
            encode(Request(**{**good, "u": (math.nan,)})),  # type: ignore[arg-type]
            encode(Request(**{**good, "src": 77})),  # type: ignore[arg-type]
            encode(Request(**{**good, "u": (1.0, 2.0)})),  # type: ignore[arg-type]
        ]
        for frame in bad_frames:
            await dealer.send(frame)
        await asyncio.sleep(0.5)
        dealer.close()
        ctx.term()
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        reports = [await final_report(proc) for proc in procs]
    finally:
        kill_all(procs)
        coordinator.close()
    by_id = {r["node"]: r for r in reports}
    assert by_id[0]["counters"]["rejected"] == len(bad_frames)
    assert by_id[2]["counters"]["rejected"] == 0
    assert all(r["t"] > 300 for r in reports)  # gossiped for seconds at 300 activations/s
    assert sum(r["counters"]["initiated"] for r in reports) > 300
    check_exact_average(reports, [VALUES[r["node"]] for r in reports], boots[0].eta)


def require_mosquitto() -> str:
    binary = shutil.which("mosquitto") or (
        "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None
    )
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mosquitto is not installed (scripts/system-deps installs it)")
        pytest.skip("mosquitto is not installed")
    return binary


@pytest.mark.broker
async def test_reports_on_mqtt_and_stop_on_the_control_topic(tmp_path: Path) -> None:
    import aiomqtt

    from continuized.coordinator.local.broker import mosquitto_broker

    async with mosquitto_broker(require_mosquitto()) as broker:
        coordinator = FakeCoordinator(
            "line:3", "rg", rate=200.0, values=np.array(VALUES), broker=broker.url, start_in=0.3
        )
        procs = []
        sub = None
        try:
            async with aiomqtt.Client(broker.host, broker.port) as client:
                await client.subscribe("gossip/test/node/+/state")
                for k in range(3):
                    procs.append(
                        await spawn_node(
                            coordinator.address,
                            f"m{k}",
                            tmp_path / f"m{k}.log",
                            "--host",
                            "127.0.0.1",
                        )
                    )
                async with asyncio.timeout(60):
                    boots = await coordinator.bootstrap(3)
                # A plain MQTT client sees the documented topic.
                sub = await asyncio.create_subprocess_exec(
                    "mosquitto_sub",
                    "-h",
                    broker.host,
                    "-p",
                    str(broker.port),
                    "-t",
                    "gossip/test/node/+/state",
                    "-C",
                    "3",
                    "-W",
                    "20",
                    "-v",
                    stdout=asyncio.subprocess.PIPE,
                )
                reports: list[dict[str, Any]] = []
                finals: dict[int, dict[str, Any]] = {}
                last_stop = -1e9
                async with asyncio.timeout(60):
                    async for message in client.messages:
                        assert isinstance(message.payload, bytes)
                        report = json.loads(message.payload)
                        assert message.topic.value == f"gossip/test/node/{report['node']}/state"
                        reports.append(report)
                        # After about three rounds of reports, stop them; again every second,
                        # as a coordinator does, for a node that subscribed late.
                        now = asyncio.get_running_loop().time()
                        if len(reports) >= 9 and now - last_stop > 1.0:
                            last_stop = now
                            await client.publish("gossip/test/control", '{"cmd": "stop"}', qos=1)
                        if report["final"]:
                            finals[report["node"]] = report
                            if len(finals) == 3:
                                break
                seen, _ = await sub.communicate()
            codes = [await proc.wait() for proc in procs]
        finally:
            kill_all(procs)
            if sub is not None and sub.returncode is None:
                sub.kill()
            coordinator.close()
    assert codes == [0, 0, 0]
    assert len(seen.decode().strip().splitlines()) == 3
    assert seen.decode().startswith("gossip/test/node/")
    keys = {
        "node",
        "name",
        "address",
        "t",
        "wall",
        "x",
        "z",
        "initial",
        "final",
        "counters",
        "rtt_ms",
        "edges",
        "first_exchange",
    }
    assert all(keys <= set(r) for r in reports)
    # Every node gossiped: its first exchange is a time of this run, after its epoch.
    assert all(r["first_exchange"] > boots[0].epoch for r in finals.values())
    assert set(reports[0]["counters"]) >= {
        "initiated",
        "served",
        "retried",
        "failed",
        "rejected",
        "duplicates",
    }
    # Stopped after about 1.5 s at 200/s: the mass is exact, the average only near.
    check_exact_average(list(finals.values()), VALUES, 0.0, atol=1e-2)
    # A node that completed none of its own exchanges reports null (unknown), never 0.
    assert max(r["rtt_ms"]["p50"] or 0.0 for r in finals.values()) > 0
    assert all(r["rtt_ms"]["p50"] is None or r["rtt_ms"]["p50"] > 0 for r in finals.values())


async def test_a_killed_node_restarts_and_recovers_its_state_exactly(tmp_path: Path) -> None:
    coordinator = FakeCoordinator("line:3", "arg", rate=300.0, start_in=0.3)
    ports = []
    for _ in range(3):
        with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as probe:
            ports.append(probe.bind_to_random_port("tcp://127.0.0.1"))
    procs: list[asyncio.subprocess.Process] = []

    def args(k: int) -> list[str]:
        return [
            "--bind",
            f"tcp://127.0.0.1:{ports[k]}",
            "--advertise",
            "127.0.0.1",
            "--value",
            str(VALUES[k]),
            "--retry-timeout",
            "0.05",
        ]

    try:
        for k in range(3):
            procs.append(
                await spawn_node(coordinator.address, f"r{k}", tmp_path / "r.log", *args(k))
            )
        async with asyncio.timeout(60):
            boots = await coordinator.bootstrap(3)
        async with asyncio.TaskGroup() as tg:
            server = tg.create_task(coordinator.serve(), name="fake-coordinator")
            await asyncio.sleep(1.0)
            procs[1].kill()  # the middle node, mid-exchange, no goodbye
            await procs[1].wait()
            procs[1] = await spawn_node(coordinator.address, "r1", tmp_path / "r.log", *args(1))
            # Start-up takes seconds on a loaded machine: wait for the recovery itself, then
            # let the new incarnation gossip (it initiates about 150 exchanges a second here).
            async with asyncio.timeout(60):
                while "recovered the ledger" not in (tmp_path / "r.log").read_text():  # noqa: ASYNC110 -- a file, no event
                    await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            reports = [await final_report(proc) for proc in procs]
            server.cancel()
    finally:
        kill_all(procs)
        coordinator.close()
    assert coordinator.reregistered == ["r1"]
    assert reports[1]["counters"]["initiated"] > 0  # the new incarnation gossiped
    check_exact_average(reports, VALUES, boots[0].eta)


@pytest.mark.broker
async def test_a_node_that_missed_the_stop_stops_on_the_retained_status(tmp_path: Path) -> None:
    import aiomqtt

    from continuized.coordinator.local.broker import mosquitto_broker

    async with mosquitto_broker(require_mosquitto()) as broker:
        coordinator = FakeCoordinator(
            "line:2", "rg", rate=100.0, values=np.array([0.0, 1.0]), broker=broker.url
        )
        procs = []
        try:
            for k in range(2):
                procs.append(
                    await spawn_node(
                        coordinator.address, f"s{k}", tmp_path / f"s{k}.log", "--host", "127.0.0.1"
                    )
                )
            async with asyncio.timeout(60):
                boots = await coordinator.bootstrap(2)
            cluster, epoch = boots[0].cluster, boots[0].epoch
            status = f"gossip/{cluster}/coordinator/status"

            async with aiomqtt.Client(broker.host, broker.port) as client:
                await client.subscribe(f"gossip/{cluster}/node/+/state")

                async def reports(seconds: float) -> list[dict[str, Any]]:
                    got: list[dict[str, Any]] = []
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(seconds):
                            async for message in client.messages:
                                assert isinstance(message.payload, bytes)
                                got.append(json.loads(message.payload))
                    return got

                # Both nodes report: they are connected and subscribed.
                async with asyncio.timeout(30):
                    while {r["node"] for r in await reports(1.0)} != {0, 1}:
                        pass
                # Another run's status (another epoch) leaves this run alone.
                other = {"phase": "done", "epoch": epoch - 100.0}
                await client.publish(status, json.dumps(other), qos=1, retain=True)
                later = await reports(1.5)
                assert {r["node"] for r in later} == {0, 1}
                assert not any(r["final"] for r in later)
                assert all(proc.returncode is None for proc in procs)
                # No stop command is ever sent: the retained status of this run ends it.
                ended = {"phase": "done", "epoch": epoch}
                await client.publish(status, json.dumps(ended), qos=1, retain=True)
                finals = [await final_report(proc) for proc in procs]
                await client.publish(status, b"", qos=1, retain=True)  # clear the retained one
        finally:
            kill_all(procs)
            coordinator.close()
    check_exact_average(finals, [0.0, 1.0], boots[0].eta)
