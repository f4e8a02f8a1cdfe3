"""An embedded broker under supervision (:attr:`coordinator.local.broker.RunningBroker.keep`):
broken mid-run, it comes back on its port, and the coordinator's MQTT link reconnects to it, again
after a second failure (a real mosquitto killed with SIGKILL; the in-process amqtt with its
listener closed, the failure an in-process broker can have).
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import psutil
import pytest

from continuized.coordinator.figures.state import BrokerStatus
from continuized.coordinator.local.broker import RunningBroker
from continuized.coordinator.mqtt.amqtt_access import AccessBroker
from continuized.coordinator.mqtt.link import MqttLink
from continuized.gossip.errors import TransportError

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def amqtt_instances(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every in-process broker started from now on, in order (to break the live one)."""
    started: list[Any] = []
    original = AccessBroker.start

    async def start(self: Any) -> None:
        started.append(self)
        await original(self)

    monkeypatch.setattr(AccessBroker, "start", start)
    return started


def _break(broker: RunningBroker, amqtt_instances: list[Any]) -> None:
    if broker.kind == "mosquitto":
        children = [p for p in psutil.Process().children() if p.name() == "mosquitto"]
        assert len(children) == 1, children
        children[0].send_signal(signal.SIGKILL)
    else:
        amqtt_instances[-1]._servers["default"].instance.close()


async def _wait(condition: Any, within: float = 20.0) -> None:
    # Polls: the link's status and the broker's restarts have no event to wait on.
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def test_a_broken_embedded_broker_is_restarted_on_its_port_and_the_link_reconnects(
    amqtt_instances: list[Any], any_broker: RunningBroker
) -> None:
    assert any_broker.keep is not None
    codes: list[int | None] = []

    def may_restart(code: int | None) -> bool:
        codes.append(code)
        return len(codes) <= 2

    status = BrokerStatus()
    link = MqttLink(any_broker.host, any_broker.port, "keep", lambda t, p: None, status)
    run = asyncio.create_task(link.run(), name="link")
    keeper = asyncio.create_task(any_broker.keep(may_restart), name="keeper")
    try:
        await _wait(lambda: status.connected)
        for failure in (1, 2):
            _break(any_broker, amqtt_instances)
            await _wait(lambda: status.reconnects == failure)  # noqa: B023
            assert status.connected
        expected = -9 if any_broker.kind == "mosquitto" else None
        assert codes == [expected, expected]
        _break(any_broker, amqtt_instances)  # a third failure is one too many
        with pytest.raises(TransportError, match="not restarted again"):
            await asyncio.wait_for(keeper, 20)
    finally:
        link.stop()
        run.cancel()
        keeper.cancel()
        await asyncio.gather(run, keeper, return_exceptions=True)
