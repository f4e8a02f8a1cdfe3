"""A node registers ready only once set up: drafts first, the run's Bootstraps after, and an
older coordinator (which knows no ``ready``) is asked again as a ready node."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

import zmq
import zmq.asyncio

from continuized.coordinator.membership.registrar import (
    RegistrarStats,
    bound_socket,
    serve_registrations,
)
from continuized.coordinator.membership.registry import Ready, Registry
from continuized.coordinator.run.config import CoordinatorConfig, prepare
from continuized.gossip.wire.schema import (
    Bootstrap,
    Neighbor,
    Register,
    RegisterError,
    decode,
    encode_bytes,
)
from continuized.node.config import NodeConfig
from continuized.node.registration import register_ready


async def test_the_nodes_set_up_from_their_drafts_before_the_epoch_is_fixed() -> None:
    _, plan = prepare(CoordinatorConfig(graph="line:3", values="onehot"))
    ctx = zmq.asyncio.Context()
    stats, ready = RegistrarStats(), list[Ready]()
    seen: list[list[Bootstrap | None]] = []

    def set_up(drafts: list[Bootstrap | None]) -> None:
        assert not ready  # no epoch while a node sets up
        seen.append(drafts)

    try:
        with bound_socket(ctx, "tcp://127.0.0.1:*") as sock:
            address = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
            server = asyncio.create_task(
                serve_registrations(sock, Registry(plan, "run"), stats, ready.append)
            )
            configs = [NodeConfig(address, name=f"node-{k}", register_every=0.2) for k in range(3)]
            addresses = [f"tcp://127.0.0.1:{7000 + k}" for k in range(3)]
            got = await register_ready(
                configs, addresses, ctx, [None] * 3, set(), set_up, asyncio.Event()
            )
            server.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await server
    finally:
        ctx.destroy(linger=0)
    assert got is not None
    boots, batched = got
    assert batched  # one process's nodes: one batch, drafts and all
    assert len(seen) == 1
    drafts = seen[0]
    assert all(d is not None and d.draft for d in drafts)
    assert [b.epoch for b in boots] == [ready[0].assignment.epoch] * 3
    assert [dataclasses.replace(b, epoch=0.0) for b in boots] == drafts


async def test_an_older_coordinator_is_asked_again_as_a_ready_node() -> None:
    boot = Bootstrap(
        node_id=0,
        cluster="gossip",
        algorithm="arg",
        eta=0.1,
        c=1.0,
        theta=0.1,
        epoch=1_700_000_000.0,
        rate=10.0,
        neighbors=(Neighbor(1, "tcp://127.0.0.1:7001", 0, 1.0),),
        initial_value=(1.0,),
        broker="",
        metrics_period=0.5,
        dim=1,
    )
    asked: list[bool] = []
    seen: list[list[Bootstrap | None]] = []
    ctx = zmq.asyncio.Context()

    async def older(sock: zmq.asyncio.Socket) -> None:
        """Answers as a coordinator before ``ready`` did: a ready field is an unknown one."""
        while True:
            *envelope, frame = await sock.recv_multipart()
            msg = decode(frame)
            assert isinstance(msg, Register)
            asked.append(msg.ready)
            answer = (
                RegisterError("bad message: register message has unexpected field(s) 'ready'")
                if not msg.ready
                else boot
            )
            await sock.send_multipart([*envelope, encode_bytes(answer)])

    try:
        with bound_socket(ctx, "tcp://127.0.0.1:*") as sock:
            address = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
            server = asyncio.create_task(older(sock))
            config = NodeConfig(address, name="node-0", register_every=0.2)
            got = await register_ready(
                [config], ["tcp://127.0.0.1:7000"], ctx, [None], set(), seen.append, asyncio.Event()
            )
            server.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await server
    finally:
        ctx.destroy(linger=0)
    assert got == ([boot], False)
    assert asked == [False, True]
    assert seen == []  # no drafts: the node sets up after its Bootstrap, as before
