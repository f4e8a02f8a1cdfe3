"""What a secured coordinator puts in the bootstraps, and the mosquitto files it writes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from urllib.parse import urlsplit

import aiomqtt
import pytest
import zmq

from coordinator.broker import MosquittoAuth, find_mosquitto, mosquitto_broker
from coordinator.config import CoordinatorConfig, prepare
from coordinator.mqtt_auth import write_mosquitto_auth
from coordinator.registry import Ready, Registry
from gossip.keys import COORDINATOR, init_keys, load_mqtt_secret, mqtt_password
from gossip.wire import Bootstrap, Register, decode, encode


def require_mosquitto() -> str:
    """The mosquitto binary; skip without it (CI installs it: fail there)."""
    binary = find_mosquitto()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mosquitto is not installed (scripts/system-deps installs it)")
        pytest.skip("mosquitto is not installed")
    return binary


def test_bootstraps_carry_the_neighbours_keys_and_each_nodes_own_mqtt_login(
    tmp_path: Path,
) -> None:
    made = init_keys(tmp_path, ["node-0", "node-1", "node-2"], zmq.curve_keypair)
    config = CoordinatorConfig(
        graph="line:3", values="onehot", broker="mqtt://10.0.0.1:1883", keys=tmp_path / COORDINATOR
    )
    _, plan = prepare(config)
    assert plan.security is not None
    registry = Registry(plan, "run")
    for k in range(3):
        outcome = registry.register(
            Register(f"node-{k}", f"tcp://127.0.0.1:{7000 + k}", None, 1), 0
        )
    assert isinstance(outcome, Ready)
    boots = {b.node_id: b for b in outcome.bootstraps.values()}
    middle = decode(encode(boots[1]))  # the keys survive the wire
    assert isinstance(middle, Bootstrap)
    assert {n.peer_id: n.key for n in middle.neighbors} == {
        0: made["node-0"].public,
        2: made["node-2"].public,
    }
    secret = load_mqtt_secret(tmp_path / COORDINATOR / "mqtt.secret")
    url = urlsplit(middle.broker)
    assert (url.username, url.password) == ("node-1", mqtt_password(secret, "node-1"))
    coordinator = urlsplit(plan.security.coordinator_broker(config.broker))
    assert coordinator.username == COORDINATOR


@pytest.mark.broker
async def test_the_acl_lets_a_node_publish_only_its_own_state(tmp_path: Path) -> None:
    secret = "k" * 32
    passwd, acl = write_mosquitto_auth(tmp_path, secret, 3)
    async with mosquitto_broker(require_mosquitto(), auth=MosquittoAuth(passwd, acl)) as broker:
        assert broker.access_controlled

        def client(user: str, name: str) -> aiomqtt.Client:
            return aiomqtt.Client(
                broker.host, broker.port, username=user, password=mqtt_password(secret, user),
                identifier=name,
            )  # fmt: skip

        async with client(COORDINATOR, "watch") as watch:
            await watch.subscribe("gossip/#")
            async with client("node-1", "n1") as n1:
                for topic in (
                    "gossip/c/node/2/state",
                    "gossip/c/control",
                    "gossip/c/coordinator/status",
                ):
                    await n1.publish(topic, b"forged", qos=1)
                await n1.publish("gossip/c/node/1/state", b"mine", qos=1)
            async with asyncio.timeout(10):
                message = await anext(aiter(watch.messages))
            # Order is kept per publisher: had any forged message got through, it came first.
            assert (message.topic.value, message.payload) == ("gossip/c/node/1/state", b"mine")
