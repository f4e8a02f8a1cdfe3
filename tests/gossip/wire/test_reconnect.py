"""The reconnect loop the node and the coordinator share (gossip.wire.reconnect), on a fake
session and a fake sleep: no broker, no real time."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.reconnect import (
    COORDINATOR_BACKOFF,
    NODE_BACKOFF,
    Attempt,
    Backoff,
    reconnecting,
)


class LostError(Exception):
    """The fake broker went away."""


class Unity(random.Random):
    """No jitter: every factor is 1, so the delays are the backoff's own."""

    def uniform(self, a: float, b: float) -> float:
        return 1.0


class Script:
    """A fake session that plays one outcome per try, then asks the loop to stop.

    Outcomes: ``"refused"`` (lost before connecting), ``"dropped"`` (connected, then lost),
    ``"ended"`` (connected, then returned).
    """

    def __init__(self, outcomes: Sequence[str]) -> None:
        self.outcomes = list(outcomes)
        self.tries = 0
        self.again: list[bool] = []
        self.delays: list[float] = []
        self.lost: list[BaseException] = []

    def ending(self) -> bool:
        return self.tries >= len(self.outcomes)

    async def session(self, attempt: Attempt) -> None:
        outcome = self.outcomes[self.tries]
        self.tries += 1
        self.again.append(attempt.again)
        if outcome == "refused":
            raise LostError(f"try {self.tries}")
        attempt.connected()
        if outcome == "dropped":
            raise LostError(f"try {self.tries}")

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)

    def loop(self, backoff: Backoff, rng: random.Random) -> Coroutine[Any, Any, None]:
        return reconnecting(
            self.session,
            retry_on=LostError,
            backoff=backoff,
            rng=rng,
            sleep=self.sleep,
            ending=self.ending,
            on_lost=self.lost.append,
        )


def _drive(coro: Coroutine[Any, Any, None]) -> None:
    """Run a coroutine that never suspends (its session and sleep are fakes) to its end."""
    with pytest.raises(StopIteration):
        coro.send(None)


def test_the_delays_double_up_to_the_most() -> None:
    script = Script(["refused"] * 8)
    _drive(script.loop(Backoff(first=0.5, most=10.0), Unity()))
    # No wait after the last try: the loop was asked to stop.
    assert script.delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert [str(error) for error in script.lost] == [f"try {k}" for k in range(1, 9)]


def test_a_session_that_connected_starts_the_delays_over() -> None:
    script = Script(["refused", "refused", "dropped", "refused", "ended", "refused", "refused"])
    _drive(script.loop(Backoff(first=1.0, most=100.0), Unity()))
    assert script.delays == [1.0, 2.0, 1.0, 2.0, 1.0, 2.0]
    # A session that returned without a stop is tried again, as a lost one is.
    assert script.tries == 7


def test_only_a_session_after_one_that_connected_is_a_reconnection() -> None:
    script = Script(["refused", "refused", "dropped", "refused", "ended"])
    _drive(script.loop(Backoff(first=1.0, most=1.0), Unity()))
    assert script.again == [False, False, False, True, True]


@given(
    first=st.floats(0.01, 10.0),
    ratio=st.floats(1.0, 100.0),
    jitter=st.floats(0.0, 0.9),
    seed=st.integers(0, 2**32),
    outcomes=st.lists(st.sampled_from(["refused", "dropped", "ended"]), min_size=1, max_size=30),
)
def test_every_delay_lies_within_the_jittered_bounds(
    first: float, ratio: float, jitter: float, seed: int, outcomes: list[str]
) -> None:
    backoff = Backoff(first=first, most=first * ratio, jitter=jitter)
    script = Script(outcomes)
    _drive(script.loop(backoff, random.Random(seed)))
    assert len(script.delays) == len(outcomes) - 1
    # Each delay is its unjittered value (doubling since the last good session) times [1 -+ j].
    base = first
    for delay, outcome in zip(script.delays, outcomes, strict=False):
        base = first if outcome != "refused" else base
        assert base * (1 - jitter) * (1 - 1e-9) <= delay <= base * (1 + jitter) * (1 + 1e-9)
        assert (
            first * (1 - jitter) * (1 - 1e-9) <= delay <= backoff.most * (1 + jitter) * (1 + 1e-9)
        )
        base = backoff.after(base)


def test_the_jitter_draws_from_the_rng_it_is_given() -> None:
    one, two = Script(["refused"] * 5), Script(["refused"] * 5)
    _drive(one.loop(NODE_BACKOFF, random.Random(7)))
    _drive(two.loop(NODE_BACKOFF, random.Random(7)))
    assert one.delays == two.delays
    assert len(set(one.delays)) == len(one.delays)  # jittered, not the bare doubling


def test_a_stop_before_the_first_try_runs_no_session() -> None:
    script = Script([])
    _drive(script.loop(NODE_BACKOFF, Unity()))
    assert script.tries == 0
    assert script.delays == []


def test_a_stop_during_a_session_ends_the_loop_without_waiting() -> None:
    stopped = False

    async def session(attempt: Attempt) -> None:
        nonlocal stopped
        attempt.connected()
        stopped = True
        raise LostError("the broker went away as we stopped")

    async def sleep(seconds: float) -> None:
        raise AssertionError(f"waited {seconds} s after a stop")

    lost: list[BaseException] = []
    loop = reconnecting(
        session,
        retry_on=LostError,
        backoff=NODE_BACKOFF,
        rng=Unity(),
        sleep=sleep,
        ending=lambda: stopped,
        on_lost=lost.append,
    )
    _drive(loop)
    assert [str(error) for error in lost] == ["the broker went away as we stopped"]


def test_an_error_that_is_not_a_lost_broker_goes_up() -> None:
    async def session(attempt: Attempt) -> None:
        raise ValueError("a bug, not the broker")

    loop = reconnecting(
        session,
        retry_on=LostError,
        backoff=NODE_BACKOFF,
        rng=Unity(),
        sleep=Script([]).sleep,
        ending=lambda: False,
    )
    with pytest.raises(ValueError, match="a bug, not the broker"):
        loop.send(None)


def test_a_task_group_lost_broker_is_retried_and_its_other_errors_go_up() -> None:
    lost: list[BaseException] = []
    tries = 0

    async def session(attempt: Attempt) -> None:
        nonlocal tries
        tries += 1
        if tries == 1:  # as a task group raises it, nested
            raise ExceptionGroup("tasks", [ExceptionGroup("inner", [LostError("nested")])])
        raise ExceptionGroup("tasks", [LostError("with a bug"), KeyError("bug")])

    loop = reconnecting(
        session,
        retry_on=(LostError,),
        backoff=NODE_BACKOFF,
        rng=Unity(),
        sleep=Script([]).sleep,
        ending=lambda: False,
        on_lost=lost.append,
    )
    with pytest.raises(ExceptionGroup) as raised:
        loop.send(None)
    assert [type(error) for error in raised.value.exceptions] == [KeyError]
    # The first error of each lost session, not its group.
    assert [str(error) for error in lost] == ["nested", "with a bug"]


@pytest.mark.parametrize("where", ["session", "sleep"])
async def test_a_cancel_ends_the_loop_in_a_session_or_in_a_wait(where: str) -> None:
    entered = asyncio.Event()
    tries = 0

    async def forever() -> None:
        entered.set()
        await asyncio.Event().wait()

    async def session(attempt: Attempt) -> None:
        nonlocal tries
        tries += 1
        if where == "session":
            attempt.connected()
            await forever()
        raise LostError("refused")

    async def sleep(seconds: float) -> None:
        assert where == "sleep", "no wait after a session that was cancelled"
        await forever()

    task = asyncio.create_task(
        reconnecting(
            session,
            retry_on=LostError,
            backoff=NODE_BACKOFF,
            rng=Unity(),
            sleep=sleep,
            ending=lambda: False,
        )
    )
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tries == 1


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"first": 0.0, "most": 1.0}, "0.0"),
        ({"first": 2.0, "most": 1.0}, "1.0"),
        ({"first": 1.0, "most": 2.0, "factor": 0.5}, "0.5"),
        ({"first": 1.0, "most": 2.0, "jitter": 1.0}, "1.0"),
        ({"first": 1.0, "most": 2.0, "jitter": -0.1}, "-0.1"),
        ({"first": float("nan"), "most": 2.0}, "nan"),
    ],
)
def test_a_bad_backoff_is_refused_by_name(kwargs: dict[str, float], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Backoff(**kwargs)


def test_the_coordinator_comes_back_sooner_than_the_nodes() -> None:
    # Its absence costs every node's reports; the nodes are many and can wait (see the module).
    assert COORDINATOR_BACKOFF.first < NODE_BACKOFF.first
    assert COORDINATOR_BACKOFF.most < NODE_BACKOFF.most
