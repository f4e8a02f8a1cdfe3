"""Waiting for an event with a time limit, without losing a cancellation, and an alarm.

On Python 3.11, ``asyncio.wait_for(event.wait(), seconds)`` swallows a
``cancel()`` that arrives in the same loop iteration as the event being set: the
inner wait completes, ``wait_for`` returns its result, and the caller carries on
as if nothing had been asked (CPython gh-86296, fixed in 3.12). A node's retry
loop waits like this thousands of times a second, so at stop it would now and
then go on looping and keep its task group, and the process, alive.

``asyncio.timeout`` has no such window, and it needs no extra task per wait.

:class:`Alarm` is the cheaper form for a loop that sleeps hundreds of times a second and is
woken early now and then (the node's retry task), or told to wake sooner
(:meth:`Alarm.wake_by`, which moves the timer and wakes nobody now): one future and one timer
per sleep, and no timeout context, whose expiry raises and catches an exception in the
sleeping task. It also never wakes before its time. uvloop's timers (libuv's) count whole
milliseconds from a clock read at the start of the loop's iteration, so a timer fires up to
about a millisecond early (4 sleeps in 10 of 0.4 to 3 ms did, measured). A loop that then
sleeps the remainder again is handed timers of 0 ms until the time passes: the node's retry
task, pausing after a refusal, slept 1.2 times per exchange that way, where it needs 0.16.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

TIMER_RESOLUTION = 0.001
"""Seconds by which a timer of the event loop may fire early (uvloop's: a millisecond)."""


async def wait_at_most(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` pass; True if the event was set.

    A cancellation always propagates, whenever it comes.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(seconds, 0.0)):
            await event.wait()
            return True
    return False


class Alarm:
    """A sleep that other code can cut short: :meth:`sleep` returns when its time has passed
    by :func:`time.monotonic` (never before; usually within :data:`TIMER_RESOLUTION` after)
    or when :meth:`ring` is called, whichever comes first.

    A ring while nobody sleeps is dropped: the sleeper decides how long to sleep from the
    state that the ring announces, and reads it after any earlier ring. A cancellation always
    propagates, even one that arrives in the same loop step as the ring or the time.
    """

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._until = 0.0

    def ring(self) -> None:
        """Wake the current sleeper now, if there is one."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def wake_by(self, seconds: float) -> None:
        """Have the current sleeper wake ``seconds`` from now at the latest: its timer is
        moved sooner, and nothing runs until then (a no-op if it already wakes sooner, or if
        nobody sleeps). Cheaper than :meth:`ring` for work that is due later, not now."""
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        seconds = max(seconds, 0.0)
        until = time.monotonic() + seconds
        if until >= self._until:
            return
        self._until = until
        if self._timer is not None:
            self._timer.cancel()
        self._arm(asyncio.get_running_loop(), seconds)

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` (no time if <= 0), or until :meth:`ring`."""
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        self._until = time.monotonic() + max(seconds, 0.0)
        self._arm(loop, max(seconds, 0.0))
        try:
            await waiter
        finally:
            if self._timer is not None:
                self._timer.cancel()
            self._waiter = self._timer = None

    def _arm(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self._timer = loop.call_later(seconds, self._on_time, loop)

    def _on_time(self, loop: asyncio.AbstractEventLoop) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        left = self._until - time.monotonic()
        if left > 0.0:  # early: wait out the rest, at least one tick of the timers' clock
            self._arm(loop, max(left, TIMER_RESOLUTION))
        else:
            waiter.set_result(None)
