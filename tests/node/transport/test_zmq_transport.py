"""The ZeroMQ transport on loopback: frames in order, answers routed back, no busy loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from continuized.node.transport.zeromq import ZmqTransport


async def test_requests_and_answers_arrive_in_order_even_before_anyone_receives() -> None:
    async with (
        ZmqTransport("tcp://127.0.0.1:0") as client,
        ZmqTransport("tcp://127.0.0.1:0") as server,
    ):
        await client.connect({7: server.address})
        for i in range(50):  # nobody is in recv() yet: the frames must wait, not be lost
            client.send(7, i.to_bytes(2, "big"))
        await asyncio.sleep(0.2)
        requests = [await asyncio.wait_for(server.recv(), 10) for _ in range(50)]
        assert [int.from_bytes(r.data, "big") for r in requests] == list(range(50))
        assert all(r.route is not None for r in requests)
        for r in requests:
            assert r.route is not None
            server.answer(r.route, r.data[::-1])
        answers = [await asyncio.wait_for(client.recv(), 10) for _ in range(50)]
        assert [a.data for a in answers] == [r.data[::-1] for r in requests]
        assert all(a.route is None for a in answers)
        assert client.stats.sent == 50
        assert server.stats.received == 50


async def test_a_moved_peer_gets_every_later_frame_at_its_new_address() -> None:
    async with (
        ZmqTransport("tcp://127.0.0.1:0") as client,
        ZmqTransport("tcp://127.0.0.1:0") as old,
        ZmqTransport("tcp://127.0.0.1:0") as new,
    ):
        await client.connect({3: old.address})
        client.send(3, b"before")
        assert (await asyncio.wait_for(old.recv(), 10)).data == b"before"
        assert client.move(3, old.address) is False  # the same address: nothing to do
        assert client.move(3, new.address) is True
        for i in range(20):
            client.send(3, i.to_bytes(2, "big"))
        got = [await asyncio.wait_for(new.recv(), 10) for _ in range(20)]
        assert [int.from_bytes(r.data, "big") for r in got] == list(range(20))
        route = got[0].route
        assert route is not None
        new.answer(route, b"answer")  # answers come back on the new connection
        assert (await asyncio.wait_for(client.recv(), 10)).data == b"answer"
        assert old.stats.received == 1


async def test_a_socket_with_work_pending_does_not_spin_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # zmq.FD stays readable, as the event loop sees it, until the socket processes its
    # commands: a reader callback that leaves them there is called at every turn of the loop.
    loop = asyncio.get_running_loop()
    calls = [0]
    add_reader = loop.add_reader

    def counting_add_reader(fd: Any, callback: Callable[..., object], *args: Any) -> None:
        def counted(*inner: Any) -> None:
            calls[0] += 1
            callback(*inner)

        add_reader(fd, counted, *args)

    monkeypatch.setattr(loop, "add_reader", counting_add_reader)
    async with (
        ZmqTransport("tcp://127.0.0.1:0") as client,
        ZmqTransport("tcp://127.0.0.1:0") as server,
    ):
        await client.connect({1: server.address})
        client.send(1, b"hello")
        await asyncio.sleep(0.3)  # nobody receives: the frame and the connection are pending
        frame = await asyncio.wait_for(server.recv(), 10)
        assert frame.data == b"hello"
    # A handful of wake-ups (connection, frame), not one per turn of an idle loop.
    assert calls[0] < 50


async def test_multipart_frames_of_a_model_go_both_ways_without_copies_on_receive() -> None:
    import numpy as np

    from continuized.gossip.wire.schema import Reply, Request, decode, encode

    u = np.random.default_rng(0).standard_normal(100_000)  # 800 kB: zero-copy sizes
    async with (
        ZmqTransport("tcp://127.0.0.1:0") as client,
        ZmqTransport("tcp://127.0.0.1:0") as server,
    ):
        await client.connect({1: server.address})
        client.send(1, encode(Request(src=0, edge=0, seq=1, ack=0, t=1.0, u=u, z=-u)))
        client.send(1, b"\x81\xa1v\x00")  # a one-part frame right after: still one frame
        got = await asyncio.wait_for(server.recv(), 10)
        assert isinstance(got.data, tuple)
        assert len(got.data) == 3
        assert isinstance(got.data[1], memoryview)  # ZeroMQ's own buffer, read in place
        request = decode(got.data)
        assert isinstance(request, Request)
        assert np.array_equal(np.asarray(request.u), u)
        assert (await asyncio.wait_for(server.recv(), 10)).data == b"\x81\xa1v\x00"
        assert got.route is not None
        server.answer(got.route, encode(Reply(src=1, edge=0, seq=1, t=1.0, dx=u, dz=2 * u)))
        answer = await asyncio.wait_for(client.recv(), 10)
        assert answer.route is None
        assert isinstance(answer.data, tuple)
        reply = decode(answer.data)
        assert isinstance(reply, Reply)
        assert np.array_equal(np.asarray(reply.dz), 2 * u)
