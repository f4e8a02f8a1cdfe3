"""node.waits: a timed wait that never loses a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from node.waits import wait_at_most


async def _cancel_right_after_set(settle_steps: int) -> bool:
    """Loop on ``wait_at_most`` as the node's retry task does; set the event, let the
    loop run ``settle_steps`` times, cancel; True if the cancellation ended the task."""
    event = asyncio.Event()
    rounds = 0

    async def retry_loop() -> None:
        nonlocal rounds
        while True:
            event.clear()
            await wait_at_most(event, 30.0)
            rounds += 1

    task = asyncio.create_task(retry_loop())
    for _ in range(3):
        await asyncio.sleep(0)
    event.set()
    for _ in range(settle_steps):
        await asyncio.sleep(0)
    task.cancel()
    # The cancelled task ends within a few loop steps; a lost cancel leaves it waiting
    # on the cleared event for 30 s, which we do not wait for.
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
    assert asyncio.run(_cancel_right_after_set(settle_steps))


def test_it_says_whether_the_event_came() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        event = asyncio.Event()
        timed_out = await wait_at_most(event, 0.01)
        already_late = await wait_at_most(event, -1.0)
        asyncio.get_running_loop().call_later(0.01, event.set)
        came = await wait_at_most(event, float("inf"))
        return timed_out, already_late, came

    assert asyncio.run(scenario()) == (False, False, True)
