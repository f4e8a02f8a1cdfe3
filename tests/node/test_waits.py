"""node.waits: a timed wait that never loses a cancellation, and the alarm."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from continuized.node.waits import Alarm, wait_at_most

Waits = tuple[Callable[[], Awaitable[object]], Callable[[], None]]


def _event_waits() -> Waits:
    """One wait of a retry loop on ``wait_at_most``, and what ends it early."""
    event = asyncio.Event()

    async def sleep() -> bool:
        event.clear()
        return await wait_at_most(event, 30.0)

    return sleep, event.set


def _alarm_waits() -> Waits:
    """One wait of a retry loop on an :class:`Alarm`, and what ends it early."""
    alarm = Alarm()
    return (lambda: alarm.sleep(30.0)), alarm.ring


async def _cancel_right_after_wake(settle_steps: int, waits: Waits) -> bool:
    """Loop on ``waits`` as the node's retry task does; end a wait early, let the loop run
    ``settle_steps`` times, cancel; True if the cancellation ended the task."""
    sleep, wake = waits

    async def retry_loop() -> None:
        while True:
            await sleep()

    task = asyncio.create_task(retry_loop())
    for _ in range(3):
        await asyncio.sleep(0)
    wake()
    for _ in range(settle_steps):
        await asyncio.sleep(0)
    task.cancel()
    # The cancelled task ends within a few loop steps; a lost cancel leaves it waiting
    # for 30 s, which we do not wait for.
    for _ in range(10):
        if task.done():
            break
        await asyncio.sleep(0)
    ended = task.done() and task.cancelled()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return ended


@pytest.mark.parametrize("settle_steps", range(5))
def test_a_cancel_in_the_same_step_as_the_event_still_cancels(settle_steps: int) -> None:
    # asyncio.wait_for on Python 3.11 loses this cancel for settle_steps 0..2.
    assert asyncio.run(_cancel_right_after_wake(settle_steps, _event_waits()))


def test_it_says_whether_the_event_came() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        event = asyncio.Event()
        timed_out = await wait_at_most(event, 0.01)
        already_late = await wait_at_most(event, -1.0)
        asyncio.get_running_loop().call_later(0.01, event.set)
        came = await wait_at_most(event, float("inf"))
        return timed_out, already_late, came

    assert asyncio.run(scenario()) == (False, False, True)


def test_an_alarm_returns_when_rung_or_when_its_time_passes() -> None:
    async def scenario() -> tuple[float, float, float, bool]:
        loop = asyncio.get_running_loop()
        alarm = Alarm()
        start = loop.time()
        await alarm.sleep(0.02)
        timed = loop.time() - start
        loop.call_soon(alarm.ring)
        start = loop.time()
        await alarm.sleep(30.0)
        rung = loop.time() - start
        alarm.ring()  # nobody sleeps: dropped, the next sleep lasts its time
        start = loop.time()
        await alarm.sleep(0.02)
        after_dropped = loop.time() - start
        await alarm.sleep(-1.0)  # a time already passed returns at once
        return timed, rung, after_dropped, alarm._waiter is None

    timed, rung, after_dropped, cleared = asyncio.run(scenario())
    assert timed >= 0.02
    assert after_dropped >= 0.02
    assert rung < 1.0
    assert cleared


@pytest.mark.parametrize("settle_steps", range(3))
def test_a_cancel_in_the_same_step_as_the_ring_still_cancels(settle_steps: int) -> None:
    assert asyncio.run(_cancel_right_after_wake(settle_steps, _alarm_waits()))


def test_an_alarm_never_wakes_before_its_time_on_uvloop() -> None:
    # uvloop's timers fire up to about a millisecond early (about 4 sleeps in 10 of these);
    # a retry loop that slept the rest again then spun on 0 ms timers.
    async def scenario() -> list[float]:
        alarm = Alarm()
        early = []
        for i in range(200):
            seconds = 0.0004 + (i % 10) * 0.0003
            start = time.monotonic()
            await alarm.sleep(seconds)
            elapsed = time.monotonic() - start
            if elapsed < seconds:
                early.append(seconds - elapsed)
        return early

    assert uvloop.run(scenario()) == []


async def test_wake_by_moves_the_sleepers_time_sooner_and_wakes_nobody_now() -> None:
    alarm = Alarm()
    start = time.monotonic()
    sleeper = asyncio.create_task(alarm.sleep(30.0))
    await asyncio.sleep(0.01)  # asleep
    alarm.wake_by(0.2)
    await asyncio.sleep(0.05)
    assert not sleeper.done()  # moved, not rung
    alarm.wake_by(10.0)  # later than its time now: no change
    async with asyncio.timeout(5):
        await sleeper
    assert 0.2 <= time.monotonic() - start < 5


def test_wake_by_without_a_sleeper_is_a_no_op() -> None:
    Alarm().wake_by(0.0)
