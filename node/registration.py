"""Registration: ask the coordinator for a Bootstrap over a DEALER, re-sending until it comes.

The coordinator answers only once the expected number of nodes has registered, so the node
re-sends its Register every ``every`` seconds (a lost frame, or a coordinator started after
the node, costs one period). A re-registration under the same name gets the same Bootstrap,
which is how a restarted node gets its id back (contract C2).

With ``keys`` the registration goes over CurveZMQ: the node checks the coordinator's public key,
and the coordinator admits only the keys of its allow-list and accepts a registration only
under the name its key is listed with. A handshake the coordinator refuses is reported at once
(a socket monitor sees it), not as a registration timeout. The same socket carries a secured
node's leave (:func:`request_leave_secure`, ``gossip node --leave --keys DIR``), which the
coordinator takes only from the leaving node's own key.

A host process registers its nodes in one message (:func:`register_batch`): one socket and,
secure, one CURVE connection (on one of its nodes' keys) instead of one per node, which the
coordinator takes only if that key's process holds every name in it; :func:`register_nodes`
tries the batch first and falls back to one registration per node, each on its own key.

A node that must set up for the run before its first step (load its shard, build its model)
registers first not ready (``Register.ready`` false), gets a draft Bootstrap to set up from
(:attr:`~gossip.wire.schema.Bootstrap.draft`), and registers again, ready
(:func:`register_ready`);
an older coordinator, which refuses the field, is asked again as a ready node.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from continuized.gossip.errors import ProtocolError, RemoteError, TransportError
from continuized.gossip.files.keys import Identity
from continuized.gossip.wire.schema import (
    Bootstrap,
    BootstrapBatch,
    Leave,
    Message,
    Register,
    RegisterBatch,
    RegisterError,
    decode,
    encode_bytes,
)
from continuized.node.config import NodeConfig
from continuized.node.transport.curve import CurveKeys, curve_client

_REFUSED = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL

__all__ = [
    "register",
    "register_batch",
    "register_nodes",
    "register_ready",
    "request_leave_secure",
]

log = logging.getLogger(__name__)


async def register(
    coordinator: str,
    request: Register,
    *,
    every: float = 2.0,
    give_up_after: float | None = None,
    context: zmq.asyncio.Context | None = None,
    keys: CurveKeys | None = None,
    coordinator_key: str = "",
) -> Bootstrap:
    """Register with the coordinator at ``coordinator`` and return its Bootstrap.

    ``keys`` and ``coordinator_key``: register over CurveZMQ with this node's key pair, to the
    coordinator whose public key is ``coordinator_key``.

    Raises
    ------
    RemoteError
        The coordinator refused the registration (its reason is in the message), or refused
        this node's key.
    TransportError
        No Bootstrap within ``give_up_after`` seconds, or the socket failed.
    """
    reply = await _ask(
        coordinator,
        encode_bytes(request),
        lambda message: message if isinstance(message, Bootstrap) else None,
        Bootstrap.TYPE,
        every,
        give_up_after,
        context,
        keys,
        coordinator_key,
    )
    assert isinstance(reply, Bootstrap)
    return reply


async def register_batch(
    coordinator: str,
    requests: Sequence[Register],
    *,
    every: float = 2.0,
    give_up_after: float | None = None,
    context: zmq.asyncio.Context | None = None,
    keys: CurveKeys | None = None,
    coordinator_key: str = "",
) -> dict[str, Bootstrap]:
    """Register the nodes of ``requests`` in one message; return each name's Bootstrap.

    ``keys``: the key pair of one of the nodes (the coordinator takes the batch if that key's
    host process holds every name in it). Re-sent every ``every`` seconds until every node's
    Bootstrap came (they may come in several messages).

    Raises
    ------
    RemoteError
        The coordinator refused the batch or one of its registrations (the reason is in the
        message; a coordinator that takes no batches from this key says so), or the key.
    TransportError
        Not every Bootstrap within ``give_up_after`` seconds, or the socket failed.
    """
    wanted = {request.name for request in requests}
    got: dict[str, Bootstrap] = {}

    def take(message: Message) -> dict[str, Bootstrap] | None:
        if isinstance(message, BootstrapBatch):
            got.update(
                (n, b)
                for n, b in zip(message.names, message.bootstraps, strict=True)
                if n in wanted
            )
        return got if len(got) == len(wanted) else None

    reply = await _ask(
        coordinator,
        encode_bytes(RegisterBatch(tuple(requests))),
        take,
        BootstrapBatch.TYPE,
        every,
        give_up_after,
        context,
        keys,
        coordinator_key,
    )
    assert isinstance(reply, dict)
    return reply


_STALE_PAUSE = 0.5  # seconds before asking again after an old run's Bootstrap


async def register_nodes(
    configs: Sequence[NodeConfig],
    addresses: Sequence[str],
    context: zmq.asyncio.Context,
    identities: Sequence[Identity | None],
    done: set[float],
    ready: bool = True,
) -> tuple[list[Bootstrap], bool]:
    """Register every node (at its ``addresses``): in one batch (one message, secure on the
    first node's key), or, if the coordinator takes no batch from this process, each on its own
    DEALER and key. Returns the Bootstraps, and whether they came for the batch.

    ``ready`` false: the nodes have not set up yet; a coordinator then answers drafts
    (``Bootstrap.draft``) once every node registered, and the real Bootstraps once every node
    registered again, ready.

    A node's Bootstrap of a run whose epoch is in ``done`` (a standing node's last run) is
    asked for again a moment later, until the next run's registrar answers."""
    if len(configs) > 1:
        try:
            boots = await _register_batch(configs, addresses, context, identities[0], done, ready)
            return boots, True
        except RemoteError as exc:
            # A coordinator that does not know this process's block of keys (a host of
            # hand-made keys, ``gossip coordinator`` without host mode) refuses the batch:
            # each node then proves its own key, as before batches.
            log.info("%s; registering the %d nodes one by one", exc, len(configs))
    async with asyncio.TaskGroup() as tg:
        jobs = [
            tg.create_task(
                _register_new(config, address, context, identity, done, ready),
                name=f"register-{config.name}",
            )
            for config, address, identity in zip(configs, addresses, identities, strict=True)
        ]
        log.info("registering %d node(s) with %s", len(jobs), configs[0].coordinator)
    return [job.result() for job in jobs], False


async def _until_stopped(
    work: Coroutine[Any, Any, tuple[list[Bootstrap], bool]], stop: asyncio.Event
) -> tuple[list[Bootstrap], bool] | None:
    """Return what ``work`` returns, or None (``work`` cancelled) if ``stop`` comes first."""
    async with asyncio.TaskGroup() as tg:
        job = tg.create_task(work, name="node-register")
        stopper = tg.create_task(stop.wait(), name="node-stop-wait")
        await asyncio.wait({job, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if job.done():
            stopper.cancel()
            return job.result()
        job.cancel()
    return None


async def register_ready(
    configs: Sequence[NodeConfig],
    addresses: Sequence[str],
    context: zmq.asyncio.Context,
    identities: Sequence[Identity | None],
    done: set[float],
    set_up: Callable[[list[Bootstrap | None]], None],
    stop: asyncio.Event,
) -> tuple[list[Bootstrap], bool] | None:
    """Register the nodes as :func:`register_nodes` does, ready only once set up: first not
    ready; then ``set_up(drafts)`` (by node, the draft Bootstrap or None: a node that got the
    run's own, a restarted one's) and again, ready, until no answer is a draft. The coordinator
    fixes t = 0 once every node is ready, so no node's clock starts while another still loads
    its shard or builds its model. None: ``stop`` came first."""
    ask = functools.partial(register_nodes, configs, addresses, context, identities, done)
    registered = await _until_stopped(ask(False), stop)
    while registered is not None and any(boot.draft for boot in registered[0]):
        set_up([boot if boot.draft else None for boot in registered[0]])
        log.info("%d node(s) set up; registering again, ready", len(configs))
        registered = await _until_stopped(ask(True), stop)
    return registered


async def _register_batch(
    configs: Sequence[NodeConfig],
    addresses: Sequence[str],
    context: zmq.asyncio.Context,
    identity: Identity | None,
    done: set[float],
    ready: bool = True,
) -> list[Bootstrap]:
    """Register every node in one :class:`~gossip.wire.schema.RegisterBatch` until their
    Bootstraps are of a run whose epoch is not in ``done`` (see :func:`_register_new`)."""
    first = configs[0]
    log.info("registering %d nodes in one batch with %s", len(configs), first.coordinator)
    while True:
        requests = [
            Register(config.name, address, config.value, os.getpid(), ready)
            for config, address in zip(configs, addresses, strict=True)
        ]
        try:
            boots = await register_batch(
                first.coordinator,
                requests,
                every=first.register_every,
                give_up_after=first.register_timeout,
                context=context,
                keys=None if identity is None else CurveKeys.of(identity),
                coordinator_key="" if identity is None else identity.coordinator,
            )
        except RemoteError as exc:
            if ready or not _older(exc):
                raise
            ready = _as_ready(exc)
            continue
        if not any(boot.epoch in done for boot in boots.values()):
            return [boots[config.name] for config in configs]
        await asyncio.sleep(_STALE_PAUSE)


async def _register_new(
    config: NodeConfig,
    address: str,
    context: zmq.asyncio.Context,
    identity: Identity | None,
    done: set[float],
    ready: bool = True,
) -> Bootstrap:
    """Register one node until it gets the Bootstrap of a run whose epoch is not in ``done``.

    A standing node that registers again right after its run may reach that run's registrar,
    which answers with the old Bootstrap until the coordinator closes it: asked again a moment
    later, the next run's registrar answers.
    """
    while True:
        try:
            boot = await register(
                config.coordinator,
                Register(config.name, address, config.value, os.getpid(), ready),
                every=config.register_every,
                give_up_after=config.register_timeout,
                context=context,
                keys=None if identity is None else CurveKeys.of(identity),
                coordinator_key="" if identity is None else identity.coordinator,
            )
        except RemoteError as exc:
            if ready or not _older(exc):
                raise
            ready = _as_ready(exc)
            continue
        if boot.epoch not in done:
            return boot
        await asyncio.sleep(_STALE_PAUSE)


def _older(refusal: RemoteError) -> bool:
    """Whether ``refusal`` is an older coordinator's, which does not know ``Register.ready``
    (a lone registration's unexpected field, or a batch entry of five items)."""
    text = str(refusal)
    return "'ready'" in text or "[name, address, value, pid], got" in text


def _as_ready(refusal: RemoteError) -> bool:
    log.info("%s; registering as ready (an older coordinator: no set-up before t = 0)", refusal)
    return True


async def request_leave_secure(
    coordinator: str,
    name: str,
    keys: CurveKeys,
    coordinator_key: str,
    *,
    give_up_after: float = 10.0,
) -> None:
    """Ask the coordinator, over CURVE with node ``name``'s own keys, to take it out for good.

    Raises
    ------
    RemoteError
        The coordinator refused (another node's key, an unknown name, a leave that would cut
        the graph; its reason is in the message), or refused the key.
    TransportError
        No answer within ``give_up_after`` seconds.
    """
    await _ask(
        coordinator,
        encode_bytes(Leave(name)),
        lambda message: message if isinstance(message, Leave) else None,
        Leave.TYPE,
        1.0,
        give_up_after,
        None,
        keys,
        coordinator_key,
    )


async def _ask(
    coordinator: str,
    frame: bytes,
    take: Callable[[Message], object | None],
    answer: str,
    every: float,
    give_up_after: float | None,
    context: zmq.asyncio.Context | None,
    keys: CurveKeys | None,
    coordinator_key: str,
) -> object:
    """Send ``frame`` every ``every`` seconds until ``take`` makes something of the answers
    (of type ``answer``), or a refusal comes."""
    ctx = context or zmq.asyncio.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    monitor = None
    if keys is not None:
        curve_client(sock, keys, coordinator_key)
        monitor = sock.get_monitor_socket(_REFUSED)
    deadline = None if give_up_after is None else time.monotonic() + give_up_after
    try:
        sock.connect(coordinator)
        resend = 0.0  # when to send the frame (again)
        while True:
            now = time.monotonic()
            if now >= resend:
                # Never wait on a send: a DEALER whose handshake was refused has no peer to
                # queue for, and a blocking send would hide the refusal (and the timeout).
                with contextlib.suppress(zmq.Again):
                    await sock.send(frame, zmq.NOBLOCK)
                resend = now + every
            # Until the next re-send: a batch's Bootstraps may come in several messages, and
            # each must not make the whole batch go again.
            wait = resend - now if deadline is None else min(resend, deadline) - now
            if deadline is not None and now >= deadline:
                raise TransportError(
                    f"no {answer} from the coordinator at {coordinator} within "
                    f"{give_up_after} s; is it running, and expecting this many nodes?"
                )
            if monitor is not None and await monitor.poll(timeout=0):
                _refused(await monitor.recv_multipart(), coordinator)
            if await sock.poll(timeout=max(wait, 0.0) * 1000):
                reply = (await sock.recv_multipart())[-1]
                try:
                    message = decode(reply)
                except ProtocolError:
                    continue  # not from a coordinator we understand; keep asking
                result = take(message)
                if result is not None:
                    return result
                if isinstance(message, RegisterError):
                    what = "the request" if answer == Leave.TYPE else "registration"
                    raise RemoteError(f"the coordinator refused {what}: {message.reason}")
    except zmq.ZMQError as exc:
        raise TransportError(f"registration with {coordinator} failed: {exc}") from None
    finally:
        if monitor is not None:
            sock.disable_monitor()
            monitor.close(0)
        sock.close(0)


def _refused(event: list[bytes], coordinator: str) -> None:
    what = parse_monitor_message(event)
    raise RemoteError(
        f"the coordinator at {coordinator} refused this node's CURVE key (handshake failed, "
        f"{zmq.Event(what['event']).name}): is the node's public key in the coordinator's "
        "allow-list, and is the node's copy of the coordinator key current? "
        "(gossip keys init writes both)"
    )
