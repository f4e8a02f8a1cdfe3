"""Work that waits for a zero-copy frame to leave: real ZeroMQ sockets on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import numpy as np
import pytest
import zmq

from continuized.coordinator.machine.ports import free_port
from continuized.node.transport import departures
from continuized.node.transport.departures import Departures
from continuized.node.transport.zeromq import ZmqTransport

_PART = np.ones(1 << 20)  # 8 MB: far above pyzmq's copy threshold, so sent without a copy


@pytest.fixture
async def dealer() -> AsyncIterator[tuple[zmq.Socket[bytes], str]]:
    """A DEALER dialling a loopback port where nobody listens yet: what it sends stays queued."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    address = f"tcp://127.0.0.1:{free_port()}"
    sock.connect(address)
    yield sock, address
    sock.close(0)
    ctx.term()


def _counter() -> tuple[list[int], Callable[[], None]]:
    runs: list[int] = []
    return runs, lambda: runs.append(1)


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():  # noqa: ASYNC110 -- a count another callback bumps, no event to wait on
        await asyncio.sleep(0.005)


async def test_work_runs_at_once_when_no_frame_is_in_zeromqs_hands() -> None:
    runs, work = _counter()
    idle = Departures()
    idle.then(work)
    assert runs == [1]
    idle.track(zmq.MessageTracker())  # a copied frame's tracker: done already
    idle.then(work)
    assert runs == [1, 1]


async def test_work_waits_until_the_frame_has_left_then_runs_once(
    dealer: tuple[zmq.Socket[bytes], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(departures, "MAX_WAIT_SECONDS", 600.0)  # only the frame can release it
    sock, address = dealer
    watch = Departures()
    watch.track(sock.send_multipart([b"head", _PART], copy=False, track=True))
    runs, work = _counter()
    watch.then(work)
    watch.then(work)  # asked again before the frame left: still once
    await asyncio.sleep(0.1)
    assert runs == []
    assert watch.waiting == 1
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(address)
    try:
        got = await asyncio.wait_for(asyncio.to_thread(router.recv_multipart), 30)
        assert len(got[-1]) == _PART.nbytes
        await asyncio.wait_for(_until(lambda: bool(runs)), 30)
        await asyncio.sleep(0.05)
        assert runs == [1]
        assert watch.waiting == 0
    finally:
        router.close(0)


async def test_work_runs_anyway_after_the_longest_wait(
    dealer: tuple[zmq.Socket[bytes], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame queued for a peer that never reads must not hold the work for ever."""
    monkeypatch.setattr(departures, "MAX_WAIT_SECONDS", 0.2)
    sock, _ = dealer
    watch = Departures()
    tracker = sock.send_multipart([b"head", _PART], copy=False, track=True)
    watch.track(tracker)
    runs, work = _counter()
    watch.then(work)
    assert runs == []
    await asyncio.wait_for(_until(lambda: bool(runs)), 30)
    assert not tracker.done  # still queued: it ran because of the wait's end
    watch.then(work)  # the stale frame is forgotten: later work runs at once
    assert runs == [1, 1]


async def test_closing_drops_the_waiting_work(dealer: tuple[zmq.Socket[bytes], str]) -> None:
    sock, _ = dealer
    watch = Departures()
    watch.track(sock.send_multipart([b"head", _PART], copy=False, track=True))
    runs, work = _counter()
    watch.then(work)
    watch.close()
    await asyncio.sleep(departures.MAX_WAIT_SECONDS * 3)
    assert runs == []
    assert watch.waiting == 0


async def test_the_transport_runs_work_once_its_model_frame_reached_the_peer() -> None:
    async with (
        ZmqTransport("tcp://127.0.0.1:0") as client,
        ZmqTransport("tcp://127.0.0.1:0") as server,
    ):
        await client.connect({1: server.address})
        runs, work = _counter()
        client.send(1, (b"head", _PART))
        client.when_sent(work)
        request = await asyncio.wait_for(server.recv(), 30)
        await asyncio.wait_for(_until(lambda: bool(runs)), 30)
        assert request.route is not None
        server.answer(request.route, (b"head", _PART))
        server.when_sent(work)
        await asyncio.wait_for(client.recv(), 30)
        await asyncio.wait_for(_until(lambda: len(runs) == 2), 30)
        client.send(1, b"small")  # copied by pyzmq: nothing to wait for
        client.when_sent(work)
        assert runs == [1, 1, 1]
