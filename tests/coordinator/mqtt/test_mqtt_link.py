"""coordinator.mqtt.link: the coordinator's link ends when asked, even when a cancel is lost,
and a busy coordinator reads many reports per turn of its event loop.

A real mosquitto; aiomqtt's publish is made to drop the cancel the way ``asyncio.wait_for``
does on Python 3.11 when the acknowledgement arrives with it (see :mod:`node.mqtt`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING

import paho.mqtt.client as paho
import pytest

from continuized.coordinator.figures.state import BrokerStatus
from continuized.coordinator.local.broker import RunningBroker
from continuized.coordinator.mqtt.link import MqttLink

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


REPORTS = 600


def _publish_reports(port: int, sent: threading.Event) -> None:
    """Publish :data:`REPORTS` QoS 0 reports from a thread of its own (the nodes)."""
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="nodes")
    client.connect("127.0.0.1", port)
    client.loop_start()
    try:
        infos = [
            client.publish(f"gossip/busy/node/{k}/state", b"{}" * 200, qos=0)
            for k in range(REPORTS)
        ]
        for info in infos:
            info.wait_for_publish(30)
    finally:
        sent.set()
        client.loop_stop()
        client.disconnect()


async def test_a_busy_coordinator_reads_many_reports_per_turn_of_its_loop(
    mosquitto: RunningBroker,
) -> None:
    received: list[str] = []
    link = MqttLink(
        mosquitto.host, mosquitto.port, "busy", lambda t, p: received.append(t), BrokerStatus()
    )
    task = asyncio.create_task(link.run())
    loop = asyncio.get_running_loop()
    turns = 0

    def busy() -> None:  # every turn of the loop costs 2 ms, as a batch of beats does
        nonlocal turns
        turns += 1
        time.sleep(0.002)
        loop.call_soon(busy)

    try:
        async with asyncio.timeout(60):
            await link.connected.wait()
        sent = threading.Event()
        publisher = threading.Thread(target=_publish_reports, args=(mosquitto.port, sent))
        publisher.start()
        await asyncio.to_thread(sent.wait, 60)  # the reports wait in the link's socket
        loop.call_soon(busy)
        async with asyncio.timeout(60):
            while len(received) < REPORTS:  # noqa: ASYNC110 -- counted by a plain callback
                await asyncio.sleep(0)
        publisher.join()
        # One report per turn took REPORTS turns; a wake-up now reads what is waiting.
        assert turns < REPORTS // 10, (turns, len(received))
    finally:
        link.stop()
        task.cancel()
        await asyncio.wait({task}, timeout=30)
