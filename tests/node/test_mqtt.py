"""node.mqtt: the MQTT link ends when asked, even when a cancel is lost (real mosquitto).

On Python 3.11, aiomqtt's ``asyncio.wait_for`` drops a cancel that arrives as the broker's
acknowledgement does; the link then reported forever and its process never exited (seen on the
arm64 CI run). These tests lose the cancel on purpose.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import aiomqtt
import pytest

from continuized.coordinator.local.broker import RunningBroker
from continuized.gossip.wire.pubsub import parse_broker
from continuized.node.mqtt import NodeMqtt

if TYPE_CHECKING:  # the fixture lives in tests/conftest.py
    from conftest import LostCancels

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]


async def _reporting_link(broker: RunningBroker) -> tuple[NodeMqtt, asyncio.Task[None]]:
    """A running link that has taken two snapshots (it is connected and reporting)."""
    address = parse_broker(broker.url)
    assert address is not None
    snapshots: list[int] = []
    reported = asyncio.Event()

    def snapshot() -> dict[str, Any]:
        snapshots.append(1)
        if len(snapshots) >= 2:
            reported.set()
        return {"node": 1}

    link = NodeMqtt(address, "lost-cancel", 1, snapshot, 0.01, lambda: None)
    task = asyncio.create_task(link.run())
    async with asyncio.timeout(60):  # turns a hang into a failure
        await reported.wait()
    return link, task


async def test_a_cancel_lost_inside_publish_still_ends_the_link(
    mosquitto: RunningBroker, publish_losing_cancels: LostCancels
) -> None:
    seen = publish_losing_cancels
    link, task = await _reporting_link(mosquitto)
    seen.publishing.clear()
    await seen.publishing.wait()  # the cancel lands inside a publish
    link.stop()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=30)
    assert seen.lost == [1], "the cancel was not lost: the test did not test anything"
    assert task in done, f"the link kept running after stop and cancel ({link.published} reports)"
    # Its last publish went through, and nothing after it.
    published = link.published
    await asyncio.sleep(0.1)
    assert link.published == published


async def test_a_task_group_unwinding_after_an_error_ends_the_link_without_stop(
    mosquitto: RunningBroker, publish_losing_cancels: LostCancels
) -> None:
    # A sibling fails while the link is inside a publish: the group cancels the link, nobody
    # calls stop, and the cancel is lost. The pending cancel (Task.cancelling) still ends it.
    seen = publish_losing_cancels
    address = parse_broker(mosquitto.url)
    assert address is not None
    link = NodeMqtt(address, "unwind", 1, lambda: {"node": 1}, 0.01, lambda: None)

    async def fail_inside_a_publish() -> None:
        await seen.publishing.wait()
        raise RuntimeError("a sibling failed")

    async def group() -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(link.run())
            tg.create_task(fail_inside_a_publish())

    task = asyncio.create_task(group())
    done, _ = await asyncio.wait({task}, timeout=30)
    assert seen.lost == [1], "the cancel was not lost: the test did not test anything"
    assert task in done, f"the group never ended: the link kept running ({link.published})"
    error = task.exception()
    assert isinstance(error, ExceptionGroup)
    assert [str(e) for e in error.exceptions] == ["a sibling failed"]


async def test_stop_alone_ends_a_connected_link(mosquitto: RunningBroker) -> None:
    link, task = await _reporting_link(mosquitto)
    link.stop()  # no cancel at all: the worst case of a lost one
    done, _ = await asyncio.wait({task}, timeout=30)
    assert task in done, "stop alone did not end the link"
    assert task.exception() is None


async def test_stop_ends_a_link_waiting_for_a_broker_that_is_down() -> None:
    address = parse_broker("mqtt://127.0.0.1:9")  # discard: nothing listens
    assert address is not None
    link = NodeMqtt(address, "down", 1, lambda: {"node": 1}, 0.01, lambda: None)
    task = asyncio.create_task(link.run())
    await asyncio.sleep(0.3)  # at least one failed connection and a backoff
    link.stop()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=30)
    assert task in done
    assert link.published == 0


async def test_trace_samples_lost_with_a_killed_broker_are_sent_again_after_it_is_back(
    mosquitto: RunningBroker,
) -> None:
    import json
    import signal

    import psutil

    from continuized.coordinator.figures.state import BrokerStatus
    from continuized.coordinator.mqtt.link import MqttLink

    address = parse_broker(mosquitto.url)
    assert address is not None
    grid = iter(range(1_000_000))

    def snapshot() -> dict[str, Any]:
        return {"node": 3, "trace": [[float(next(grid)), 0.5]]}  # one new grid time a report

    seen: set[float] = set()

    def collect(topic: str, payload: bytes) -> None:
        if topic.endswith("/state"):
            seen.update(g for g, _ in json.loads(payload)["trace"])

    status = BrokerStatus()
    collector = MqttLink(mosquitto.host, mosquitto.port, "resend", collect, status)
    node = NodeMqtt(address, "resend", 3, snapshot, 0.01, lambda: None)
    assert mosquitto.keep is not None
    tasks = [asyncio.create_task(collector.run(), name="collector")]
    try:
        async with asyncio.timeout(60):
            await collector.connected.wait()  # before the node's first report
            tasks.append(asyncio.create_task(node.run(), name="node"))
            tasks.append(asyncio.create_task(mosquitto.keep(lambda code: True), name="keeper"))
            while len(seen) < 20:  # noqa: ASYNC110  (the collector has no event to wait on)
                await asyncio.sleep(0.01)
            broker = [p for p in psutil.Process().children() if p.name() == "mosquitto"]
            broker[0].send_signal(signal.SIGKILL)
            while node.reconnects < 1 or status.reconnects < 1:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            high = max(seen)
            while max(seen) < high + 20:  # noqa: ASYNC110  (reports after the outage)
                await asyncio.sleep(0.01)
    finally:
        collector.stop()
        node.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    # Every grid time up to the last one received arrived: none was lost in the outage.
    missing = {float(g) for g in range(int(max(seen)) + 1)} - seen
    assert not missing, (sorted(missing), node.reconnects, status.reconnects, max(seen))


async def test_a_follower_hears_the_control_topic_through_its_leader_once(
    mosquitto: RunningBroker,
) -> None:
    # Host mode, secure: one connection per node publishes, only the first one subscribes.
    address = parse_broker(mosquitto.url)
    assert address is not None
    heard: dict[str, list[object]] = {"leader": [], "follower": []}
    stopped = {"leader": asyncio.Event(), "follower": asyncio.Event()}
    links = {
        who: NodeMqtt(address, "follow", k, lambda: {"node": 0}, 0.05, stopped[who].set)
        for k, who in enumerate(("leader", "follower"))
    }
    for who, link in links.items():
        link.on_command(heard[who].append)
    links["follower"].follow(links["leader"])
    tasks = [asyncio.create_task(link.run()) for link in links.values()]
    try:
        async with asyncio.timeout(60):
            while links["follower"].published < 2:  # noqa: ASYNC110 -- a count: no event
                await asyncio.sleep(0.02)
            async with aiomqtt.Client(address.host, address.port) as client:
                while not heard["follower"]:  # the leader's subscription may come later
                    await client.publish("gossip/follow/control", b'{"cmd": "view", "v": 1}')
                    await asyncio.sleep(0.2)
                await client.publish("gossip/follow/control", b'{"cmd": "stop"}', qos=1)
            await stopped["follower"].wait()
        assert stopped["leader"].is_set()
        # Once per message, through the leader (a subscription of its own would double it).
        assert heard["follower"] == heard["leader"]
        assert links["follower"].published >= 2  # it reports on its own connection
    finally:
        for link in links.values():
            link.stop()
        await asyncio.wait(tasks, timeout=30)
