"""The node's Poisson clock as timer callbacks: every tick fires in order, late ones too, a
tick's error ends the clock's task, and a tick wakes the retry task sleeping with nothing
pending."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from _nodetest import bootstraps

from continuized.gossip.errors import TransportError
from continuized.gossip.exchange.vocabulary import Link
from continuized.node import FakeNetwork, Node
from continuized.node.clock import PoissonClock


def _node(epoch: float, rate: float = 400.0) -> Node:
    addresses = ["mem://node-0", "mem://node-1"]
    boot = bootstraps("line:2", "arg", rate, epoch, np.zeros(2), addresses)[0]
    return Node(boot, FakeNetwork().endpoint(addresses[0]), seed=7, recover=False)


async def test_ticks_fire_in_their_stream_order_late_ones_too_none_dropped() -> None:
    # t = 0 still ahead when the clock task starts, however busy the machine: the first node of
    # a test process takes its imports' and kernels' time (once 0.16 s, past a 0.05 s margin).
    node = _node(epoch=time.time() + 1.0)
    fired: list[tuple[float, int]] = []
    stalled: list[float] = []
    enough = asyncio.Event()

    def record(t: float, edge: int) -> None:
        fired.append((t, edge))
        if not stalled:  # the machine is busy for a quarter second: the next ticks are late
            time.sleep(0.25)
            stalled.append(time.time())
        elif node.timebase.wall(t) > stalled[0] + 0.1:
            enough.set()

    node._on_tick = record  # type: ignore[method-assign]
    ticking = asyncio.create_task(node._tick())
    await asyncio.wait_for(enough.wait(), timeout=30)
    ticking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await ticking
    # The same seed's stream from t = 0: every tick, in order, none skipped.
    links = [Link(n.edge_index, n.peer_id, n.prob, n.step) for n in node.boot.neighbors]
    twin = PoissonClock(links, np.random.default_rng(7))
    t, expected = 0.0, []
    for _ in fired:
        t, edge = twin.next_after(t)
        expected.append((t, edge))
    assert fired == expected
    late = [t for t, _ in fired[1:] if node.timebase.wall(t) < stalled[0]]
    assert len(late) > 10  # a quarter second at 200 ticks/s of this end
    assert node.late_ticks >= len(late)


async def test_an_error_in_a_tick_ends_the_clock_task_with_it() -> None:
    node = _node(epoch=time.time())

    def broken(t: float, edge: int) -> None:
        raise TransportError("the socket is gone")

    node._on_tick = broken  # type: ignore[method-assign]
    with pytest.raises(TransportError, match="the socket is gone"):
        await asyncio.wait_for(node._tick(), timeout=30)


async def test_an_exchange_started_while_the_retry_task_sleeps_idle_wakes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With nothing pending the retry task sleeps long (node.daemon, _IDLE_WAKE); a request
    sent meanwhile must still be re-sent at its timeout. Here the idle sleep never ends by
    itself and the neighbour never answers: only the wake-up the tick gives makes the retry."""
    monkeypatch.setattr("continuized.node.daemon._IDLE_WAKE", 1e6)
    node = _node(epoch=time.time())
    await node.transport.connect({1: "mem://node-1"})  # nobody there: the request is lost
    retrying = asyncio.create_task(node._retry())
    try:
        while not node._retry_idle:  # noqa: ASYNC110 -- asleep with nothing pending: no event
            await asyncio.sleep(0.01)
        node._on_tick(node.timebase.t(time.time()), node.boot.neighbors[0].edge_index)
        assert node.exchanger.pending == 1
        async with asyncio.timeout(60):
            while node.exchanger.counters.retried == 0:  # noqa: ASYNC110 -- a count: no event
                await asyncio.sleep(0.01)
    finally:
        retrying.cancel()
        with pytest.raises(asyncio.CancelledError):
            await retrying
