"""Fixtures shared by the whole suite: brokers, and a rule for missing system dependencies."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiomqtt
import pytest
from system_tools import require_mosquitto

from continuized.coordinator.local.broker import RunningBroker, amqtt_broker, mosquitto_broker


def pytest_configure(config: pytest.Config) -> None:
    """Start every test's child processes with SIGINT (Ctrl-C) at its default action.

    Tests press Ctrl-C on ``gossip up`` by sending it SIGINT. A shell without job control starts
    its background jobs (``cmd &`` in a script) with SIGINT ignored, and every process inherits
    that: a suite started so would hand it to each ``gossip up``, which could then not be
    interrupted (it hung three tests once). A handler installed here is reset to the default
    action in every child at exec.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
async def mosquitto() -> AsyncIterator[RunningBroker]:
    """A real mosquitto process on a free loopback port, for this test only."""
    async with mosquitto_broker(require_mosquitto()) as running:
        yield running


@pytest.fixture
async def amqtt() -> AsyncIterator[RunningBroker]:
    """An in-process amqtt broker on a free loopback port, for this test only."""
    async with amqtt_broker() as running:
        yield running


@pytest.fixture(params=["amqtt", pytest.param("mosquitto", marks=pytest.mark.broker)])
async def any_broker(request: pytest.FixtureRequest) -> AsyncIterator[RunningBroker]:
    """Each kind of embedded broker in turn: in-process amqtt, then a real mosquitto."""
    if request.param == "mosquitto":
        async with mosquitto_broker(require_mosquitto()) as running:
            yield running
    else:
        async with amqtt_broker() as running:
            yield running


@dataclass
class LostCancels:
    """What :func:`publish_losing_cancels` saw: a publish began; how many cancels it swallowed."""

    publishing: asyncio.Event = field(default_factory=asyncio.Event)
    lost: list[int] = field(default_factory=list)


@pytest.fixture
def publish_losing_cancels(monkeypatch: pytest.MonkeyPatch) -> LostCancels:
    """aiomqtt's publish made to swallow a cancel that lands in it, then publish anyway.

    That is what ``asyncio.wait_for`` does on Python 3.11 when the broker's acknowledgement
    arrives with the cancel (see :mod:`node.mqtt`).
    """
    original = aiomqtt.Client.publish
    seen = LostCancels()

    async def publish(self: aiomqtt.Client, *args: Any, **kwargs: Any) -> None:
        seen.publishing.set()
        try:
            await asyncio.sleep(0.2)  # waiting for the broker's acknowledgement
        except asyncio.CancelledError:
            seen.lost.append(1)
        await original(self, *args, **kwargs)

    monkeypatch.setattr(aiomqtt.Client, "publish", publish)
    return seen
