"""Waiting for an event with a time limit, without losing a cancellation.

On Python 3.11, ``asyncio.wait_for(event.wait(), seconds)`` swallows a
``cancel()`` that arrives in the same loop iteration as the event being set: the
inner wait completes, ``wait_for`` returns its result, and the caller carries on
as if nothing had been asked (CPython gh-86296, fixed in 3.12). A node's retry
loop waits like this thousands of times a second, so at stop it would now and
then go on looping and keep its task group, and the process, alive.

``asyncio.timeout`` has no such window, and it needs no extra task per wait.
"""

from __future__ import annotations

import asyncio
import contextlib


async def wait_at_most(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` pass; True if the event was set.

    A cancellation always propagates, whenever it comes.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(seconds, 0.0)):
            await event.wait()
            return True
    return False
