"""CurveZMQ on the node's sockets: only the neighbours' keys get in, each as its node id."""

from __future__ import annotations

import asyncio
import contextlib

import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

from continuized.node.transport.curve import CurveKeys
from continuized.node.transport.zeromq import ZmqTransport


def keypair() -> CurveKeys:
    public, secret = zmq.curve_keypair()
    return CurveKeys(public.decode(), secret.decode())


async def wait_handshake_refused(sock: zmq.asyncio.Socket) -> None:
    """Wait until ``sock``'s handshake is refused by the server's ZAP handler."""
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    try:
        event = await asyncio.wait_for(recv_monitor_message(monitor), 60)
        assert event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH
    finally:
        sock.disable_monitor()
        monitor.close(0)


async def test_neighbours_exchange_and_every_frame_carries_its_senders_id() -> None:
    ka, kb = keypair(), keypair()
    async with (
        ZmqTransport("tcp://127.0.0.1:0", keys=ka) as a,
        ZmqTransport("tcp://127.0.0.1:0", keys=kb) as b,
    ):
        a.trust({5: kb.public})
        b.trust({4: ka.public})
        await a.connect({5: b.address})
        a.send(5, b"request")
        got = await asyncio.wait_for(b.recv(), 10)
        assert (got.data, got.sender) == (b"request", 4)
        assert got.route is not None
        b.answer(got.route, b"reply")
        back = await asyncio.wait_for(a.recv(), 10)
        assert (back.data, back.sender, back.route) == (b"reply", 5, None)


async def test_an_unknown_key_or_a_plain_socket_never_gets_a_frame_in() -> None:
    ka, kb = keypair(), keypair()
    async with (
        ZmqTransport("tcp://127.0.0.1:0", keys=ka) as a,
        ZmqTransport("tcp://127.0.0.1:0", keys=kb, hold=0.2) as b,
    ):
        b.trust({4: ka.public})
        ctx = zmq.asyncio.Context()
        try:
            outsider = ctx.socket(zmq.DEALER)  # its own fresh key; knows b's public key
            own = keypair()
            outsider.curve_serverkey = kb.public.encode()
            outsider.curve_publickey = own.public.encode()
            outsider.curve_secretkey = own.secret.encode()
            plain = ctx.socket(zmq.DEALER)  # no CURVE at all
            for sock in (outsider, plain):
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.SNDTIMEO, 0)
            refused = asyncio.ensure_future(wait_handshake_refused(outsider))
            await asyncio.sleep(0)
            for sock in (outsider, plain):
                sock.connect(b.address)
                for _ in range(20):  # queued before the handshake, or refused: never in
                    with contextlib.suppress(zmq.Again):
                        await sock.send(b"forged request")
            await refused
            assert b.denied >= 1  # the outsider's key was refused by ZAP
            # A trusted neighbour still gets through, and its frame is the only one.
            a.trust({5: kb.public})
            await a.connect({5: b.address})
            a.send(5, b"genuine")
            got = await asyncio.wait_for(b.recv(), 10)
            assert (got.data, got.sender) == (b"genuine", 4)
            assert b.stats.received == 1
        finally:
            ctx.destroy(linger=0)


async def test_servers_sharing_a_context_each_admit_only_their_own_neighbours() -> None:
    # Host mode: one context, hence one ZAP handler, for several nodes' ROUTERs.
    ka, kb, kx = keypair(), keypair(), keypair()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        async with (
            ZmqTransport("tcp://127.0.0.1:0", keys=ka, context=ctx) as a,
            ZmqTransport("tcp://127.0.0.1:0", keys=kb, context=ctx, hold=0.2) as b,
            ZmqTransport("tcp://127.0.0.1:0", keys=kx) as x,
        ):
            a.trust({7: kx.public})  # x is a's neighbour, not b's
            b.trust({8: ka.public})
            x.trust({1: ka.public, 2: kb.public})
            await x.connect({1: a.address, 2: b.address})
            x.send(2, b"to b")  # refused: b does not know x's key
            x.send(1, b"to a")
            got = await asyncio.wait_for(a.recv(), 10)
            assert (got.data, got.sender) == (b"to a", 7)
            async with asyncio.timeout(30):  # x's handshake reaches b's gate, is refused
                while b.denied == 0:  # noqa: ASYNC110 -- a count in the gate: no event
                    await asyncio.sleep(0.01)
            assert (a.denied, b.stats.received) == (0, 0)
            # b's own neighbour gets in on the shared handler, labelled with b's id for it.
            a.trust({7: kx.public, 8: kb.public})
            await a.connect({8: b.address})
            a.send(8, b"a to b")
            got = await asyncio.wait_for(b.recv(), 10)
            assert (got.data, got.sender) == (b"a to b", 8)
    finally:
        ctx.term()


async def test_a_handshake_before_the_servers_first_allow_list_waits_for_it() -> None:
    # The race every start has: b is bound, and a learned b's key and address from the
    # bootstrap before b did. libzmq never retries a refused handshake, so a refusal here
    # would leave a unable to reach b for the whole run.
    ka, kb = keypair(), keypair()
    async with (
        ZmqTransport("tcp://127.0.0.1:0", keys=ka) as a,
        ZmqTransport("tcp://127.0.0.1:0", keys=kb) as b,
    ):
        a.trust({5: kb.public})
        await a.connect({5: b.address})
        a.send(5, b"early")
        async with asyncio.timeout(30):  # the handshake reached b's gate, which holds it
            while b.held == 0:  # noqa: ASYNC110 -- a count in the gate: no event
                await asyncio.sleep(0.01)
        b.trust({4: ka.public})
        got = await asyncio.wait_for(b.recv(), 10)
        assert (got.data, got.sender) == (b"early", 4)
        assert b.denied == 0
        assert got.route is not None
        b.answer(got.route, b"reply")
        back = await asyncio.wait_for(a.recv(), 10)
        assert back.data == b"reply"
        assert a.redial(5) is False  # it has heard from b: left alone


async def test_a_gate_with_an_allow_list_holds_a_joiners_key_until_a_new_list_admits_it() -> None:
    # A joiner's case: b already has neighbours, and learns of a's key only later.
    ka, kb, kc = keypair(), keypair(), keypair()
    async with (
        ZmqTransport("tcp://127.0.0.1:0", keys=ka) as a,
        ZmqTransport("tcp://127.0.0.1:0", keys=kb) as b,
    ):
        b.trust({9: kc.public})
        a.trust({5: kb.public})
        await a.connect({5: b.address})
        a.send(5, b"early")
        async with asyncio.timeout(30):
            while b.held == 0:  # noqa: ASYNC110 -- a count in the gate: no event
                await asyncio.sleep(0.01)
        b.trust({9: kc.public, 4: ka.public})
        got = await asyncio.wait_for(b.recv(), 10)
        assert (got.data, got.sender) == (b"early", 4)
        assert (b.denied, a.redial(5)) == (0, False)  # no redial: the first dial got in


async def test_a_key_held_past_the_hold_is_refused_and_a_redial_after_the_hold_gets_in() -> None:
    ka, kb, kc = keypair(), keypair(), keypair()
    async with (
        ZmqTransport("tcp://127.0.0.1:0", keys=ka, hold=0.3) as a,
        ZmqTransport("tcp://127.0.0.1:0", keys=kb, hold=0.3) as b,
    ):
        b.trust({9: kc.public})
        a.trust({5: kb.public})
        await a.connect({5: b.address})
        a.send(5, b"refused")
        async with asyncio.timeout(30):
            while b.denied == 0:  # noqa: ASYNC110 -- a count in the gate: no event
                await asyncio.sleep(0.01)
        assert b.held == 1
        b.trust({9: kc.public, 4: ka.public})
        assert a.redial(5) is True  # silent for a whole hold since its dial
        a.send(5, b"admitted")
        got = await asyncio.wait_for(b.recv(), 10)
        # The frame queued on the refused socket went with it; the protocol re-sends.
        assert (got.data, got.sender) == (b"admitted", 4)
        assert a.stats.extra["redialed"] == 1


async def test_a_held_handshake_does_not_stall_another_servers_handshakes() -> None:
    # Host mode: one ZAP handler for every server of the process. pyzmq's answers one request
    # at a time, so a handshake held by one server kept every other from completing.
    kb1, kb2, kx = keypair(), keypair(), keypair()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        async with (
            ZmqTransport("tcp://127.0.0.1:0", keys=kb1, context=ctx) as b1,
            ZmqTransport("tcp://127.0.0.1:0", keys=kb2, context=ctx) as b2,
            ZmqTransport("tcp://127.0.0.1:0", keys=kx) as x,
        ):
            b2.trust({7: kx.public})  # b1 has no allow-list yet: it holds x's handshake
            x.trust({1: kb1.public, 2: kb2.public})
            await x.connect({1: b1.address})
            x.send(1, b"held")
            async with asyncio.timeout(30):
                while b1.held == 0:  # noqa: ASYNC110 -- a count in the gate: no event
                    await asyncio.sleep(0.01)
            await x.connect({2: b2.address})
            x.send(2, b"not held")
            got = await asyncio.wait_for(b2.recv(), 10)  # b1 still holds (for 20 s)
            assert (got.data, got.sender) == (b"not held", 7)
            b1.trust({7: kx.public})
            got = await asyncio.wait_for(b1.recv(), 10)
            assert (got.data, got.sender) == (b"held", 7)
            assert (b1.denied, b2.denied) == (0, 0)
    finally:
        ctx.term()


async def test_a_multipart_frame_is_authenticated_and_answered_like_any_other() -> None:
    ka, kb = keypair(), keypair()
    parts = (b"map", bytes(range(256)) * 400)  # a raw part of zero-copy size
    async with (
        ZmqTransport("tcp://127.0.0.1:0", keys=ka) as a,
        ZmqTransport("tcp://127.0.0.1:0", keys=kb) as b,
    ):
        a.trust({5: kb.public})
        b.trust({4: ka.public})
        await a.connect({5: b.address})
        a.send(5, parts)
        got = await asyncio.wait_for(b.recv(), 10)
        assert isinstance(got.data, tuple)
        assert got.sender == 4
        assert [bytes(p) for p in got.data] == list(parts)
        assert got.route is not None
        b.answer(got.route, parts)
        back = await asyncio.wait_for(a.recv(), 10)
        assert isinstance(back.data, tuple)
        assert [bytes(p) for p in back.data] == list(parts)
        assert (back.sender, back.route) == (5, None)


async def test_a_peer_still_silent_after_a_redial_is_redialled_again_only_after_a_pause() -> None:
    """A slow handshake (a loaded peer process) must not be restarted over and over: 4,096
    secure nodes redialled 23,443 times and never caught up."""
    ka, kb = keypair(), keypair()
    async with (
        ZmqTransport("tcp://127.0.0.1:0", keys=ka, hold=0.2) as a,
        ZmqTransport("tcp://127.0.0.1:0", keys=kb, hold=0.2) as b,
    ):
        b.trust({9: keypair().public})  # a's key is refused: a's DEALER never hears a thing
        a.trust({5: kb.public})
        await a.connect({5: b.address})
        assert a.redial(5) is False  # the first: not within a hold of the dial
        await asyncio.sleep(0.25)
        assert a.redial(5) is True
        assert a.redial(5) is False  # the second: not within a second of the first
        assert a.stats.extra["redialed"] == 1
        await asyncio.sleep(1.05)
        assert a.redial(5) is True
        assert a.redial(5) is False  # the third: two seconds after the second
        assert a.stats.extra["redialed"] == 2


async def test_a_plain_dealer_is_never_redialled() -> None:
    # Nothing refuses a plain connection, and libzmq reconnects a broken one by itself.
    async with (
        ZmqTransport("tcp://127.0.0.1:0", hold=0.0) as a,
        ZmqTransport("tcp://127.0.0.1:0") as b,
    ):
        await a.connect({5: b.address})
        await b.aclose()  # silent for good
        await asyncio.sleep(0.05)
        assert a.redial(5) is False
        assert "redialed" not in a.stats.extra
