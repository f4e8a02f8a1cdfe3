"""coordinator.mqtt_link: the coordinator's link ends when asked, even when a cancel is lost.

A real mosquitto; aiomqtt's publish is made to drop the cancel the way ``asyncio.wait_for``
does on Python 3.11 when the acknowledgement arrives with it (see :mod:`node.mqtt`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiomqtt
import pytest

from coordinator.broker import RunningBroker
from coordinator.mqtt_link import MqttLink
from coordinator.state import BrokerStatus

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]


async def test_a_cancel_lost_inside_publish_still_ends_the_link(
    mosquitto: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = aiomqtt.Client.publish
    publishing = asyncio.Event()
    lost: list[int] = []

    async def publish_losing_cancels(self: aiomqtt.Client, *args: Any, **kwargs: Any) -> None:
        publishing.set()
        try:
            await asyncio.sleep(0.2)  # waiting for the broker's acknowledgement
        except asyncio.CancelledError:
            lost.append(1)
        await original(self, *args, **kwargs)

    monkeypatch.setattr(aiomqtt.Client, "publish", publish_losing_cancels)
    received: list[str] = []
    link = MqttLink(
        mosquitto.host, mosquitto.port, "lost", lambda t, p: received.append(t), BrokerStatus()
    )
    task = asyncio.create_task(link.run())
    async with asyncio.timeout(60):
        await link.connected.wait()
    link.set_status({"phase": "running"})
    async with asyncio.timeout(60):
        await publishing.wait()  # the cancel lands inside the status's publish
    link.stop()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=30)
    assert lost == [1], "the cancel was not lost: the test did not test anything"
    assert task in done, "the coordinator's link kept running after stop and cancel"
    assert not link.connected.is_set()
