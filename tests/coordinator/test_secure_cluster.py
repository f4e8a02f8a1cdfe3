"""A secured ``gossip up`` run under attack: real node processes, each embedded broker in turn.

The issue's attack: an outside process sends well-formed requests to node 3 of line:8 claiming
``src`` 2 on their shared edge. Secured, the outsider (its own fresh CURVE key) never gets a
frame in, an insider (node 2's key) that claims to be node 4 is counted as forged, and the run's
mass stays exact. On MQTT, an anonymous client is refused and a node cannot publish another
node's state or the control topic, with mosquitto and with the in-process amqtt alike.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiomqtt
import pytest
import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

from continuized.cli.entries import NODE_ENTRIES
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.local.broker import BrokerKind, RunningBroker, find_mosquitto
from continuized.coordinator.local.launcher import run_up
from continuized.coordinator.local.settings import UpConfig
from continuized.coordinator.run.service import CoordinatorConfig
from continuized.gossip.files.keys import COORDINATOR, load_identity, load_mqtt_secret
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.wire.access import mqtt_password
from continuized.gossip.wire.schema import Request, encode

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


def require_mosquitto() -> None:
    """Skip without mosquitto (CI installs it: fail there)."""
    if find_mosquitto() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mosquitto is not installed (scripts/system-deps installs it)")
        pytest.skip("mosquitto is not installed")


async def until(check: Callable[[], bool], what: str, within: float = 60.0) -> None:
    """Wait for ``check()`` (an event or a count), failing with ``what`` after ``within`` s."""
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 -- a count in the coordinator's state: no event
            await asyncio.sleep(0.05)
    assert check(), what


def forged_requests(src: int, edge: int, count: int) -> list[bytes]:
    return [
        encode(Request(src=src, edge=edge, seq=10**6 + k, ack=0, t=1.0, u=(1e3,)))
        for k in range(count)
    ]


async def attack_exchanges(
    keys: Path, target: str, ctx: zmq.asyncio.Context
) -> list[zmq.asyncio.Socket]:
    """The outsider and the insider of the module header, against node 3 at ``target``."""
    node3 = load_identity(keys / "node-3")
    edges = dict((peer, k) for k, peer in parse_topology("line:8").incident(3))
    outsider = ctx.socket(zmq.DEALER)
    public, secret = zmq.curve_keypair()
    outsider.curve_serverkey = node3.public.encode()
    outsider.curve_publickey, outsider.curve_secretkey = public, secret
    monitor = outsider.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    outsider.connect(target)
    for frame in forged_requests(2, edges[2], 20):  # the attack, verbatim
        await outsider.send(frame)
    event = await asyncio.wait_for(recv_monitor_message(monitor), 30)
    assert event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH
    outsider.disable_monitor()
    insider = ctx.socket(zmq.DEALER)  # node 2's key, claiming to be node 4
    node2 = load_identity(keys / "node-2")
    insider.curve_serverkey = node3.public.encode()
    insider.curve_publickey, insider.curve_secretkey = node2.public.encode(), node2.secret.encode()
    insider.connect(target)
    for frame in forged_requests(4, edges[4], 20):
        await insider.send(frame)
    return [outsider, monitor, insider]


async def attack_mqtt(broker: RunningBroker, keys: Path, cluster: str) -> list[dict[str, Any]]:
    """Rogue MQTT clients; return what a coordinator-credentialed watcher saw from them."""
    with pytest.raises(aiomqtt.MqttError):  # anonymous: refused
        async with aiomqtt.Client(broker.host, broker.port, timeout=5):
            pass
    with pytest.raises(aiomqtt.MqttError):  # node-5 with a wrong password: refused
        async with aiomqtt.Client(
            broker.host, broker.port, username="node-5", password="guess", timeout=5
        ):
            pass
    secret = load_mqtt_secret(keys / COORDINATOR / "mqtt.secret")
    seen: list[dict[str, Any]] = []
    async with aiomqtt.Client(
        broker.host,
        broker.port,
        username=COORDINATOR,
        password=mqtt_password(secret, COORDINATOR),
        identifier="test-watcher",
    ) as watcher:
        await watcher.subscribe(f"gossip/{cluster}/node/3/state")
        await watcher.subscribe(f"gossip/{cluster}/control")
        async with aiomqtt.Client(  # an insider: node 5's own credentials
            broker.host,
            broker.port,
            username="node-5",
            password=mqtt_password(secret, "node-5"),
            identifier="rogue",
        ) as rogue:
            bogus = {"node": 3, "name": "rogue", "x": [1e6], "z": [1e6], "t": 1.0}
            await rogue.publish(f"gossip/{cluster}/node/3/state", json.dumps(bogus), qos=1)
            await rogue.publish(
                f"gossip/{cluster}/control", json.dumps({"cmd": "stop", "run": "rogue"}), qos=1
            )
        genuine = 0
        async for message in watcher.messages:  # the broker keeps per-client order
            payload = json.loads(bytes(message.payload))  # type: ignore[arg-type]
            seen.append(payload)
            genuine += payload.get("name") == "node-3"
            if genuine >= 5 or payload.get("final"):
                break
    return seen


@pytest.mark.parametrize("embedded", [pytest.param("mosquitto", marks=pytest.mark.broker), "amqtt"])
async def test_forged_exchanges_and_rogue_reports_change_nothing(
    tmp_path: Path, embedded: BrokerKind
) -> None:
    if embedded == "mosquitto":
        require_mosquitto()
    cluster = "sec"
    config = UpConfig(
        entries=NODE_ENTRIES,
        coordinator=CoordinatorConfig(
            graph="line:8",
            algorithm="arg",
            rate=50.0,
            values="onehot",
            until=1e-9,
            cluster=cluster,
            metrics_period=0.1,
        ),
        log_dir=tmp_path,
        embedded=embedded,
        timeout=120.0,
    )
    started: dict[str, Any] = {}

    def on_start(state: ClusterState, broker: RunningBroker) -> None:
        started.update(state=state, broker=broker)

    run = asyncio.ensure_future(run_up(config, on_start))
    ctx = zmq.asyncio.Context()
    sockets: list[zmq.asyncio.Socket] = []
    try:
        await until(lambda: "state" in started or run.done(), "the run did not start")
        state: ClusterState = started["state"]
        await until(lambda: 3 in state.nodes and state.nodes[3].address != "", "no node 3")
        sockets = await attack_exchanges(tmp_path / "keys", state.nodes[3].address, ctx)
        await until(
            lambda: state.nodes[3].counters.get("forged", 0) >= 20,
            "node 3 did not count the insider's 20 forged requests",
        )
        seen = await attack_mqtt(started["broker"], tmp_path / "keys", cluster)
        summary = await asyncio.wait_for(run, 150)
    finally:
        for sock in sockets:
            sock.close(0)
        ctx.term()
        if not run.done():
            run.cancel()
    assert all(msg.get("name") != "rogue" and msg.get("run") != "rogue" for msg in seen)
    assert summary.stop_reason == "reached"
    assert summary.mass_drift_rel is not None
    assert summary.mass_drift_rel < 1e-9
    final = json.loads((tmp_path / "node-3.log").read_text().strip().splitlines()[-1])
    assert final["counters"]["forged"] == 20
    assert final["counters"]["rejected"] == 0  # the outsider's frames never got in
