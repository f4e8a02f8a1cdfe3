"""Nodes of one process reach each other over inproc, and are still known by their keys."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import zmq
import zmq.asyncio
from zmq.utils import z85

from continuized.node.transport.colocation import Colocation, inproc_routing_id
from continuized.node.transport.curve import CurveKeys
from continuized.node.transport.zeromq import ZmqTransport

UNREACHABLE = "tcp://192.0.2.1:9"  # TEST-NET-1: nothing answers there


def keypair() -> CurveKeys:
    public, secret = zmq.curve_keypair()
    return CurveKeys(public.decode(), secret.decode())


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.term()


async def test_a_colocated_server_is_dialled_over_inproc_not_at_its_address(
    ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    here = Colocation()
    async with (
        ZmqTransport("tcp://127.0.0.1:0", context=ctx, colocation=here) as a,
        ZmqTransport("tcp://127.0.0.1:0", context=ctx, colocation=here) as b,
    ):
        endpoint = here.endpoint(b.address)
        assert endpoint is not None
        assert endpoint.startswith("inproc://")
        # b is also listed at an address nothing answers at: only inproc can carry the frame.
        here.add(UNREACHABLE, endpoint)
        await a.connect({2: UNREACHABLE})
        assert a.stats.extra["inproc_peers"] == 1
        a.send(2, (b"head", memoryview(b"x" * 100_000)))
        got = await asyncio.wait_for(b.recv(), 10)
        assert got.data[0] == b"head"
        assert bytes(got.data[1]) == b"x" * 100_000
        assert got.route is not None
        assert got.sender is None
        b.answer(got.route, b"reply")
        back = await asyncio.wait_for(a.recv(), 10)
        assert back.data == b"reply"
    # Closed: a and b are dialled at their addresses again (the made-up one is left).
    assert here.endpoint(a.address) is None
    assert here.endpoint(b.address) is None
    assert len(here) == 1


async def test_a_server_of_another_process_is_dialled_at_its_address(
    ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    async with (
        ZmqTransport("tcp://127.0.0.1:0", context=ctx, colocation=Colocation()) as a,
        ZmqTransport("tcp://127.0.0.1:0") as far,
    ):
        await a.connect({3: far.address})
        assert a.stats.extra["inproc_peers"] == 0
        a.send(3, b"over tcp")
        got = await asyncio.wait_for(far.recv(), 10)
        assert got.data == b"over tcp"


async def test_a_colocated_neighbour_is_known_by_its_key_and_a_stranger_is_not(
    ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    here = Colocation()
    ka, kb, kc = keypair(), keypair(), keypair()
    async with (
        ZmqTransport("tcp://127.0.0.1:0", keys=ka, context=ctx, colocation=here) as a,
        ZmqTransport("tcp://127.0.0.1:0", keys=kb, context=ctx, colocation=here) as b,
        ZmqTransport("tcp://127.0.0.1:0", keys=kc, context=ctx, colocation=here) as c,
    ):
        a.trust({5: kb.public})
        b.trust({4: ka.public})  # c is not b's neighbour
        c.trust({5: kb.public})
        await a.connect({5: b.address})
        await c.connect({5: b.address})
        assert a.stats.extra["inproc_peers"] == c.stats.extra["inproc_peers"] == 1
        a.send(5, b"from a")
        got = await asyncio.wait_for(b.recv(), 10)
        assert (got.data, got.sender) == (b"from a", 4)
        assert got.route is not None
        b.answer(got.route, b"to a")
        back = await asyncio.wait_for(a.recv(), 10)
        assert (back.data, back.sender) == (b"to a", 5)
        c.send(5, b"from c")  # gets in (no handshake to refuse it), but as nobody
        got = await asyncio.wait_for(b.recv(), 10)
        assert (got.data, got.sender) == (b"from c", -1)
        assert a.redial(5) is False  # no handshake that could have been refused


async def test_a_network_peer_cannot_claim_a_colocated_key_in_its_routing_id(
    ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    ka, kb, kx = keypair(), keypair(), keypair()
    async with ZmqTransport(
        "tcp://127.0.0.1:0", keys=kb, context=ctx, colocation=Colocation()
    ) as b:
        b.trust({4: ka.public, 9: kx.public})
        other = zmq.asyncio.Context()
        try:
            x = other.socket(zmq.DEALER)  # x's own key, a's key in its routing id
            x.setsockopt(zmq.LINGER, 0)
            x.curve_serverkey = kb.public.encode()
            x.curve_publickey, x.curve_secretkey = kx.public.encode(), kx.secret.encode()
            x.setsockopt(zmq.ROUTING_ID, inproc_routing_id(z85.decode(ka.public)))
            x.connect(b.address)
            await x.send(b"claims to be a")
            got = await asyncio.wait_for(b.recv(), 10)
            assert (got.data, got.sender) == (b"claims to be a", 9)  # its handshake's key
        finally:
            other.destroy(linger=0)
