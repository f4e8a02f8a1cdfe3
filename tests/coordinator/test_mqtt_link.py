"""coordinator.mqtt_link: the coordinator's link ends when asked, even when a cancel is lost.

A real mosquitto; aiomqtt's publish is made to drop the cancel the way ``asyncio.wait_for``
does on Python 3.11 when the acknowledgement arrives with it (see :mod:`node.mqtt`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from coordinator.broker import RunningBroker
from coordinator.mqtt_link import MqttLink
from coordinator.state import BrokerStatus

if TYPE_CHECKING:  # the fixture lives in tests/conftest.py
    from conftest import LostCancels

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]


async def test_a_cancel_lost_inside_publish_still_ends_the_link(
    mosquitto: RunningBroker, publish_losing_cancels: LostCancels
) -> None:
    seen = publish_losing_cancels
    received: list[str] = []
    link = MqttLink(
        mosquitto.host, mosquitto.port, "lost", lambda t, p: received.append(t), BrokerStatus()
    )
    task = asyncio.create_task(link.run())
    async with asyncio.timeout(60):
        await link.connected.wait()
    link.set_status({"phase": "running"})
    async with asyncio.timeout(60):
        await seen.publishing.wait()  # the cancel lands inside the status's publish
    link.stop()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=30)
    assert seen.lost == [1], "the cancel was not lost: the test did not test anything"
    assert task in done, "the coordinator's link kept running after stop and cancel"
    assert not link.connected.is_set()
