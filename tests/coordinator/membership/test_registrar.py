"""The registration server on real sockets: a host process's batch, secured, and fairness.

A batch registers a host process's nodes in one message over one CURVE connection. The server
takes it only from a key whose process holds every name in it (``gossip up``'s blocks, four
nodes per process here), so a key cannot register, or move, another process's node. And a
queue of registrations does not keep the event loop to the server alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from continuized.coordinator.membership.plan import Plan
from continuized.coordinator.membership.registrar import (
    RegistrarStats,
    bound_socket,
    serve_registrations,
)
from continuized.coordinator.membership.registry import Ready, Registry
from continuized.coordinator.run.config import CoordinatorConfig, prepare
from continuized.coordinator.run.enrollment import batch_rule
from continuized.gossip.errors import RemoteError
from continuized.gossip.files.keys import COORDINATOR, Identity, init_keys, load_identity
from continuized.gossip.wire.schema import (
    Beat,
    BeatBatch,
    Bootstrap,
    Register,
    RegisterError,
    decode,
    encode_bytes,
)
from continuized.node.registration import register_batch
from continuized.node.transport.curve import CurveKeys, curve_client

NODES, PER_PROCESS = 8, 4


def requests(first: int, count: int, port: int = 7000) -> list[Register]:
    return [
        Register(f"node-{k}", f"tcp://127.0.0.1:{port + k}", None, 1)
        for k in range(first, first + count)
    ]


@contextlib.asynccontextmanager
async def server(
    ctx: zmq.asyncio.Context, plan: Plan, stats: RegistrarStats, ready: list[Ready]
) -> AsyncIterator[tuple[str, Registry]]:
    """A registration server on a free loopback port: its address and its registry."""
    sec = plan.security
    registry = Registry(plan, "run")
    with bound_socket(
        ctx,
        "tcp://127.0.0.1:*",
        secret=sec.secret if sec else "",
        allowed=sec.allowed if sec else None,
    ) as sock:
        task = asyncio.create_task(
            serve_registrations(
                sock,
                registry,
                stats,
                ready.append,
                authenticated=sec is not None,
                on_beat=lambda beat: Beat(beat.name, beat.epoch, ""),  # an echo
                may_batch=batch_rule(sec),
            )
        )
        try:
            yield sock.getsockopt(zmq.LAST_ENDPOINT).decode(), registry
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def beats(ctx: zmq.asyncio.Context, address: str, key: Identity, names: list[str]) -> object:
    """Send one BeatBatch of ``names`` with ``key``; return the decoded answer."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    curve_client(sock, CurveKeys.of(key), key.coordinator)
    try:
        sock.connect(address)
        await sock.send(encode_bytes(BeatBatch(tuple(Beat(n, 1.0, "") for n in names))))
        async with asyncio.timeout(20):
            return decode(await sock.recv())
    finally:
        sock.close(0)


async def test_a_host_registers_its_own_nodes_in_one_batch_and_no_other_processs(
    tmp_path: Path,
) -> None:
    init_keys(tmp_path, [f"node-{k}" for k in range(NODES)], zmq.curve_keypair)
    _, plan = prepare(
        CoordinatorConfig(graph="line:8", values="onehot", keys=tmp_path / COORDINATOR)
    )
    assert plan.security is not None
    # gossip up --nodes-per-process 4: host-0 holds node-0 .. node-3, host-1 node-4 .. node-7.
    plan = dataclasses.replace(
        plan, security=dataclasses.replace(plan.security, nodes=NODES, per_process=PER_PROCESS)
    )
    keys: dict[int, Identity] = {k: load_identity(tmp_path / f"node-{k}") for k in range(NODES)}

    def batch(key: int, regs: list[Register], within: float = 20.0) -> asyncio.Task[object]:
        return asyncio.ensure_future(
            register_batch(
                address,
                regs,
                every=30.0,  # one message per batch: no re-send within the test
                give_up_after=within,
                context=ctx,
                keys=CurveKeys.of(keys[key]),
                coordinator_key=keys[key].coordinator,
            )
        )

    ctx = zmq.asyncio.Context()
    stats, ready = RegistrarStats(), []
    try:
        async with server(ctx, plan, stats, ready) as (address, registry):
            # node-0's key names node-4, of the other process: refused whole, nothing recorded.
            with pytest.raises(RemoteError, match=r"'node-4'.*does not hold"):
                await batch(0, [*requests(0, 3), *requests(4, 1)])
            assert registry.count == 0
            assert stats.impostors == 1
            # Each process on one of its own keys (any of them): one message each.
            first, second = batch(2, requests(0, 4)), batch(5, requests(4, 4))
            boots = [await first, await second]
            assert isinstance(boots[0], dict)
            assert isinstance(boots[1], dict)
            assert sorted(boots[0]) == [f"node-{k}" for k in range(4)]
            assert {b.node_id for b in boots[1].values()} == {4, 5, 6, 7}
            assert (stats.batches, stats.registers) == (3, 0)
            assert len(ready) == 1
            # After the bootstrap, a batch could move a node: node-0's key cannot move node-4.
            with pytest.raises(RemoteError, match="does not hold"):
                await batch(0, requests(4, 1, port=9000))
            assignment = registry.assignment
            assert assignment is not None
            assert assignment.addresses[4] == "tcp://127.0.0.1:7004"
            assert stats.impostors == 2
            # The process's beats go together too, under the same rule.
            assert await beats(ctx, address, keys[1], ["node-0", "node-3"]) == BeatBatch(
                (Beat("node-0", 1.0, ""), Beat("node-3", 1.0, ""))
            )
            refused = await beats(ctx, address, keys[1], ["node-1", "node-4"])
            assert isinstance(refused, RegisterError)
            assert stats.impostors == 3
    finally:
        ctx.destroy(linger=0)


async def test_a_secured_coordinator_without_host_blocks_refuses_batches(
    tmp_path: Path,
) -> None:
    """``gossip coordinator`` with keys but no host mode: each node must prove its own key (the
    host then registers its nodes one by one, node.host)."""
    init_keys(tmp_path, ["node-0", "node-1"], zmq.curve_keypair)
    _, plan = prepare(
        CoordinatorConfig(graph="line:2", values="onehot", keys=tmp_path / COORDINATOR)
    )
    own = load_identity(tmp_path / "node-0")
    ctx = zmq.asyncio.Context()
    stats, ready = RegistrarStats(), []
    try:
        async with server(ctx, plan, stats, ready) as (address, registry):
            with pytest.raises(RemoteError, match="takes no batch of registrations"):
                await register_batch(
                    address,
                    requests(0, 1),
                    give_up_after=20.0,
                    context=ctx,
                    keys=CurveKeys.of(own),
                    coordinator_key=own.coordinator,
                )
            assert registry.count == 0
            assert stats.impostors == 0  # not an attack: the host's first try
    finally:
        ctx.destroy(linger=0)


async def test_queued_registrations_do_not_keep_the_loop_to_the_server() -> None:
    """Thousands of nodes re-sending their registrations queue them faster than a loaded
    coordinator takes them; a message already queued is taken without yielding, so the server
    must yield itself, or the launcher in its process stops forking and ignores SIGTERM."""
    _, plan = prepare(CoordinatorConfig(graph="line:64", values="onehot"))
    count = 1500  # within the DEALER's and the ROUTER's high-water marks (1,000 each)
    ctx = zmq.asyncio.Context()
    stats, ready = RegistrarStats(), []
    try:
        async with contextlib.AsyncExitStack() as stack:
            registry = Registry(plan, "run")
            sock = stack.enter_context(bound_socket(ctx, "tcp://127.0.0.1:*"))
            sender = ctx.socket(zmq.DEALER)
            stack.callback(sender.close, 0)
            sender.connect(sock.getsockopt(zmq.LAST_ENDPOINT).decode())
            frame = encode_bytes(requests(1, 1)[0])  # the same node's re-sends: each waits
            for _ in range(count):
                await sender.send(frame)
            while not await sock.poll(0):  # noqa: ASYNC110 -- the first one queued
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # and the rest: nothing else runs in this loop meanwhile
            seen: list[int] = []

            async def watch() -> None:
                while stats.received < count:
                    seen.append(stats.received)
                    await asyncio.sleep(0)

            watcher = asyncio.create_task(watch())
            serving = asyncio.create_task(serve_registrations(sock, registry, stats, ready.append))
            await asyncio.wait_for(watcher, 30)
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
    finally:
        ctx.destroy(linger=0)
    assert stats.registers == count
    # The watcher ran while the queue drained, not only before and after it.
    assert any(0 < n < count for n in seen), seen[:5]


async def test_hosts_that_set_up_get_drafts_then_their_bootstraps_once_all_are_ready() -> None:
    """Two hosts of four, insecure: registered not ready, each host gets its drafts in one
    answer when the count is reached, and the run's Bootstraps (same ids, an epoch) only once
    both registered again, ready."""
    _, plan = prepare(CoordinatorConfig(graph="line:8", values="onehot"))
    ctx = zmq.asyncio.Context()
    stats, ready = RegistrarStats(), []

    def batch(address: str, first: int, is_ready: bool) -> asyncio.Task[dict[str, Bootstrap]]:
        regs = [dataclasses.replace(r, ready=is_ready) for r in requests(first, 4)]
        return asyncio.ensure_future(
            register_batch(address, regs, every=30.0, give_up_after=20.0, context=ctx)
        )

    try:
        async with server(ctx, plan, stats, ready) as (address, registry):
            drafts = [batch(address, 0, False), batch(address, 4, False)]
            first = [await task for task in drafts]
            assert all(b.draft for boots in first for b in boots.values())
            assert not ready
            assert not registry.bootstrapped
            early = batch(address, 0, True)
            while stats.batches < 3:  # noqa: ASYNC110 -- until the server took it
                await asyncio.sleep(0.01)
            assert not registry.bootstrapped  # the other host is still setting up
            assert not early.done()
            boots = {**await batch(address, 4, True), **await early}
            assert len(ready) == 1
            for name, boot in boots.items():
                assert not boot.draft
                assert boot.epoch == ready[0].assignment.epoch
                assert dataclasses.replace(boot, epoch=0.0) == {**first[0], **first[1]}[name]
    finally:
        ctx.destroy(linger=0)
