"""coordinator.mqtt.link: a broker the coordinator cannot reach at the start is named in
seconds, with the fix; a refused login is said at once (not waited out as an outage)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from aiomqtt.exceptions import MqttConnectError, MqttError
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from continuized.coordinator.figures.state import BrokerStatus
from continuized.coordinator.local.broker import BrokerAuth, amqtt_broker
from continuized.coordinator.mqtt.auth import write_broker_auth
from continuized.coordinator.mqtt.link import MqttLink, refused_for_good
from continuized.gossip.errors import TransportError

pytestmark = pytest.mark.timeout(60)


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _reached(link: MqttLink, within: float) -> None:
    task = asyncio.create_task(link.run())
    try:
        await link.reached(within)
    finally:
        link.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_broker_that_is_not_there_is_named_with_the_fix() -> None:
    port = _closed_port()
    link = MqttLink.to(f"mqtt://127.0.0.1:{port}", "gone", lambda t, p: None, BrokerStatus())
    with pytest.raises(TransportError) as caught:
        await _reached(link, 0.5)
    message = str(caught.value)
    assert message.startswith(f"cannot reach the MQTT broker mqtt://127.0.0.1:{port} within")
    assert "mosquitto" in message
    assert "--broker" in message


async def test_a_refused_login_is_said_without_waiting(tmp_path: Path) -> None:
    auth = BrokerAuth(*write_broker_auth(tmp_path / "mqtt", "s" * 32, 1))
    async with amqtt_broker(auth=auth) as broker:
        link = MqttLink.to(
            f"mqtt://coordinator:wrong@127.0.0.1:{broker.port}",
            "auth",
            lambda t, p: None,
            BrokerStatus(),
        )
        with pytest.raises(TransportError) as caught:
            # The whole budget would be an hour: only the refusal can end this in time.
            await asyncio.wait_for(_reached(link, 3600.0), 30)
    message = str(caught.value)
    assert message.startswith(f"the MQTT broker mqtt://127.0.0.1:{broker.port} refused")
    assert "--keys" in message


def test_what_is_refused_for_good() -> None:
    bad_login = ReasonCode(PacketTypes.CONNACK, identifier=134)
    unavailable = ReasonCode(PacketTypes.CONNACK, identifier=136)
    assert refused_for_good(MqttConnectError(bad_login))
    assert not refused_for_good(MqttConnectError(unavailable))
    assert refused_for_good(MqttError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify"))
    assert not refused_for_good(MqttError("[Errno 111] Connection refused"))
    assert not refused_for_good(MqttError("[Errno -2] Name or service not known"))
