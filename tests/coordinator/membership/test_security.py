"""What a secured coordinator puts in the bootstraps, and the access control both brokers apply.

The same tests run against a real mosquitto and the in-process amqtt, each given the same
password file and ACL (:func:`coordinator.mqtt.auth.write_broker_auth`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiomqtt
import pytest
import zmq

from continuized.coordinator.local.broker import (
    BrokerAuth,
    RunningBroker,
    amqtt_broker,
    find_mosquitto,
    mosquitto_broker,
)
from continuized.coordinator.membership.registry import Ready, Registry
from continuized.coordinator.membership.security import Security
from continuized.coordinator.mqtt.auth import write_broker_auth
from continuized.coordinator.run.config import CoordinatorConfig, prepare
from continuized.gossip.files.keys import COORDINATOR, init_keys, load_mqtt_secret
from continuized.gossip.wire.access import OPERATOR, mqtt_password
from continuized.gossip.wire.schema import Bootstrap, Register, decode, encode


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


def test_in_host_mode_each_node_gets_its_host_processs_login() -> None:
    # gossip up --nodes-per-process 4 with 10 nodes: hosts of 4, 3 and 3 nodes.
    security = Security("pub", "sec", {}, mqtt_secret="s", nodes=10, per_process=4)
    users = [urlsplit(security.node_broker("mqtt://h:1883", k)).username for k in range(10)]
    assert users == ["host-0"] * 4 + ["host-1"] * 3 + ["host-2"] * 3
    # One URL per process, hence one connection (node.host._mqtt_links).
    assert len({security.node_broker("mqtt://h:1883", k) for k in range(4, 7)}) == 1
    password = urlsplit(security.node_broker("mqtt://h:1883", 5)).password
    assert password == mqtt_password("s", "host-1")


async def _embedded(
    kind: str, tmp_path: Path, per_process: int
) -> AsyncIterator[tuple[RunningBroker, str]]:
    secret = "k" * 32
    auth = BrokerAuth(*write_broker_auth(tmp_path / "mqtt", secret, 10, per_process))
    if kind == "mosquitto":
        async with mosquitto_broker(require_mosquitto(), auth=auth) as broker:
            yield broker, secret
    else:
        async with amqtt_broker(auth=auth) as broker:
            yield broker, secret


@pytest.fixture(params=[pytest.param("mosquitto", marks=pytest.mark.broker), "amqtt"])
async def host_broker(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[RunningBroker, str]]:
    """Each embedded broker in turn, with the accounts of 10 nodes, 4 per process."""
    async for pair in _embedded(request.param, tmp_path, 4):
        yield pair


async def test_a_host_account_publishes_its_own_nodes_state_and_no_other_processs(
    host_broker: tuple[RunningBroker, str],
) -> None:
    broker, secret = host_broker
    async with _client(broker, secret, COORDINATOR, "watch") as watch:
        await watch.subscribe("gossip/#")
        async with _client(broker, secret, "host-1", "h1") as h1:  # nodes 4, 5 and 6
            for node in (3, 7, 0):  # host-0's last, host-2's first, and another
                await h1.publish(f"gossip/c/node/{node}/state", b"forged", qos=1)  # dropped
            await h1.publish("gossip/c/control", b"forged", qos=1)
            for node in (4, 6):
                await h1.publish(f"gossip/c/node/{node}/state", b"mine", qos=1)
        got = []
        async with asyncio.timeout(10):
            async for message in watch.messages:
                got.append((message.topic.value, message.payload))
                if len(got) == 2:
                    break
        # Per-publisher order: had any forged message got through, it came first.
        assert got == [("gossip/c/node/4/state", b"mine"), ("gossip/c/node/6/state", b"mine")]
    # In host mode the nodes have no accounts of their own.
    with pytest.raises(aiomqtt.MqttCodeError, match="Not authorized"):
        async with _client(broker, secret, "node-4", "n4"):
            pass


@pytest.fixture(params=[pytest.param("mosquitto", marks=pytest.mark.broker), "amqtt"])
async def secure_broker(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[RunningBroker, str]]:
    """Each embedded broker in turn, given the same password file and ACL; and the secret."""
    secret = "k" * 32
    auth = BrokerAuth(*write_broker_auth(tmp_path / "mqtt", secret, 3))
    if request.param == "mosquitto":
        async with mosquitto_broker(require_mosquitto(), auth=auth) as broker:
            yield broker, secret
    else:
        async with amqtt_broker(auth=auth) as broker:
            yield broker, secret


def _client(
    broker: RunningBroker, secret: str, user: str, name: str, password: str | None = None
) -> aiomqtt.Client:
    return aiomqtt.Client(
        broker.host,
        broker.port,
        username=user,
        password=mqtt_password(secret, user) if password is None else password,
        identifier=name,
        timeout=10,
    )


async def test_anonymous_clients_and_wrong_passwords_are_refused(
    secure_broker: tuple[RunningBroker, str],
) -> None:
    broker, secret = secure_broker
    assert broker.access_controlled
    for user, password in ((None, None), ("node-1", "guess"), ("stranger", "guess")):
        with pytest.raises(aiomqtt.MqttCodeError) as refused:
            async with aiomqtt.Client(
                broker.host, broker.port, username=user, password=password, timeout=10
            ):
                pass
        # The broker answered (CONNACK), and said no: not a closed port.
        assert "Not authorized" in str(refused.value), (user, refused.value)
    async with _client(broker, secret, "node-1", "n1"):  # the right password: admitted
        pass


async def test_the_acl_lets_a_node_publish_only_its_own_state(
    secure_broker: tuple[RunningBroker, str],
) -> None:
    broker, secret = secure_broker
    async with _client(broker, secret, COORDINATOR, "watch") as watch:
        await watch.subscribe("gossip/#")
        async with _client(broker, secret, "node-1", "n1") as n1:
            for topic in (
                "gossip/c/node/2/state",
                "gossip/c/control",
                "gossip/c/coordinator/status",
            ):
                await n1.publish(topic, b"forged", qos=1)  # acknowledged, and dropped
            await n1.publish("gossip/c/node/1/state", b"mine", qos=1)
        async with asyncio.timeout(10):
            message = await anext(aiter(watch.messages))
        # Order is kept per publisher: had any forged message got through, it came first.
        assert (message.topic.value, message.payload) == ("gossip/c/node/1/state", b"mine")


# What each broker answers to a subscription the ACL does not cover: amqtt refuses it
# (SUBACK 0x80); mosquitto 2.0 grants it and then checks each message (see
# coordinator.mqtt.amqtt_access). Either way, no message the node may not read reaches it.
_REFUSED_SUBACK = {"amqtt": {128}, "mosquitto": {0, 1}}


async def test_a_node_reads_only_what_the_acl_lets_it_read(
    secure_broker: tuple[RunningBroker, str],
) -> None:
    broker, secret = secure_broker
    async with _client(broker, secret, "node-1", "n1") as n1:
        allowed = await n1.subscribe("gossip/c/control", qos=1)
        assert [int(code.value) for code in allowed] == [1]
        for wide in ("gossip/#", "gossip/c/node/2/state", "gossip/c/node/+/state", "#"):
            codes = await n1.subscribe(wide, qos=1)
            assert {int(code.value) for code in codes} <= _REFUSED_SUBACK[broker.kind], wide
        async with _client(broker, secret, COORDINATOR, "coord") as coord:
            # Retained, as the coordinator's status is: a refused subscription must not
            # replay it either.
            await coord.publish("gossip/c/node/2/state", b"secret", qos=1, retain=True)
            await coord.publish("gossip/c/node/0/state", b"also", qos=1)
            await coord.publish("gossip/c/control", b"stop", qos=1)
        async with asyncio.timeout(10):
            message = await anext(aiter(n1.messages))
        # Per-publisher order again: the control message is the first n1 may read.
        assert (message.topic.value, message.payload) == ("gossip/c/control", b"stop")
        late = await n1.subscribe("gossip/c/node/2/state", qos=1)  # the retained one now
        assert {int(code.value) for code in late} <= _REFUSED_SUBACK[broker.kind]
        extra = await _next_message(n1, 1.0)
        assert extra is None, f"node-1 read {extra.topic.value}: {extra.payload!r}"


async def test_a_node_that_connects_gets_no_retained_message_it_may_not_read(
    secure_broker: tuple[RunningBroker, str],
) -> None:
    broker, secret = secure_broker
    async with _client(broker, secret, COORDINATOR, "coord") as coord:
        await coord.subscribe("gossip/#")  # someone else's subscription covers the retained one
        await coord.publish("gossip/c/node/2/state", b"secret", qos=1, retain=True)
        await coord.publish("gossip/c/coordinator/status", b"status", qos=1, retain=True)
        async with _client(broker, secret, "node-1", "n1") as n1:
            await n1.subscribe("gossip/c/coordinator/status", qos=1)
            async with asyncio.timeout(10):
                message = await anext(aiter(n1.messages))
            assert (message.topic.value, message.payload) == (
                "gossip/c/coordinator/status",
                b"status",
            )
            extra = await _next_message(n1, 1.0)
            assert extra is None, f"node-1 read {extra.topic.value}: {extra.payload!r}"


async def _next_message(client: aiomqtt.Client, within: float) -> aiomqtt.Message | None:
    """The next message ``client`` receives within ``within`` seconds, or ``None``."""
    try:
        async with asyncio.timeout(within):
            return await anext(aiter(client.messages))
    except TimeoutError:
        return None


async def test_the_operator_may_submit_runs_and_nothing_else(
    secure_broker: tuple[RunningBroker, str],
) -> None:
    broker, secret = secure_broker
    async with _client(broker, secret, COORDINATOR, "watch") as watch:
        await watch.subscribe("gossip/#")
        async with _client(broker, secret, OPERATOR, "op") as operator:
            for topic in (
                "gossip/c/control",
                "gossip/c/node/1/state",
                "gossip/c/coordinator/status",
                "gossip/c/result/r1",
            ):
                await operator.publish(topic, b"forged", qos=1)  # acknowledged, and dropped
            await operator.publish("gossip/c/submit/r1", b"{}", qos=1)
        async with asyncio.timeout(10):
            message = await anext(aiter(watch.messages))
        # Per-publisher order: had any forged message got through, it came first.
        assert (message.topic.value, message.payload) == ("gossip/c/submit/r1", b"{}")
