"""The registration server: a ZeroMQ ROUTER that feeds the
:class:`~coordinator.membership.registry.Registry`.

A node's DEALER sends one frame, an encoded :class:`~gossip.wire.schema.Register` (an empty
delimiter frame before it, as REQ-style peers send, is accepted and echoed). The server decodes it,
asks the registry, and answers with a :class:`~gossip.wire.schema.Bootstrap` or a
:class:`~gossip.wire.schema.RegisterError`; a registration that completes the count makes it answer
every waiting node at once (with drafts first to those not ready: the registry). A frame that
does not decode, or is neither a Register nor a Leave, gets
a RegisterError naming the problem, and never changes the registry.

The server keeps running after the bootstrap so that a restarted node, registering again under
its name, gets its Bootstrap back; if it came back on another address, the registry records it
and ``on_readdress`` is told (the coordinator republishes its retained assignment).

Secured (``bound_socket(..., secret=..., allowed=...)``): the ROUTER is a CurveZMQ server whose
ZAP handler admits only the allow-list's public keys and labels each connection with the name
the key is listed under; a registration under any other name is refused. The coordinator
then sends each node its neighbours' public keys in the bootstrap.

A :class:`~gossip.wire.schema.Leave` (``gossip node --leave``) goes to ``on_leave`` with the name of
the key it came with; the coordinator takes it only for that key's own node, echoes it back,
or answers a RegisterError saying why not (a forged one is also counted, ``forged_leaves``).

A :class:`~gossip.wire.schema.RegisterBatch` (a host process's nodes, :mod:`node.host`) is the
registrations of its nodes in one message, answered with
:class:`~gossip.wire.schema.BootstrapBatch` messages: one message, and secure one CURVE
connection, per process instead of per node. Each registration in it is taken as a lone one
would be; secured, a batch is taken only if ``may_batch(key_name, name)`` allows the key it
came with to register every name in it (``gossip up``'s host process holds the keys of its
block of nodes, :func:`gossip.wire.access.host_blocks`); otherwise it is refused as a whole
(counted in ``impostors``), and the host registers its nodes one by one, each on its own key.

A :class:`~gossip.wire.schema.Beat` (a bootstrapped node's lifeline, :mod:`node.lifeline`) goes
to ``on_beat`` with the name of its key, and its answer, if any, goes back; a beat under another
name than the key's is refused and counted (``impostors``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import zmq
import zmq.asyncio
from zmq.auth.asyncio import AsyncioAuthenticator
from zmq.utils import z85

from continuized.coordinator.membership.registry import (
    Known,
    Prepare,
    Readdressed,
    Ready,
    Refused,
    Registry,
    Waiting,
)
from continuized.gossip.errors import ProtocolError, TransportError
from continuized.gossip.wire.schema import (
    MAX_FRAME,
    Beat,
    BeatBatch,
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

__all__ = ["FLUSH_MS", "RegistrarStats", "bound_socket", "serve_registrations"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RegistrarStats:
    """Counters of the registration server."""

    received: int = 0
    registers: int = 0  # Register messages (one node each)
    batches: int = 0  # RegisterBatch messages (a host process's nodes each)
    refused: int = 0
    malformed: int = 0
    bootstraps_sent: int = 0
    impostors: int = 0  # registrations under another name than the key's
    forged_leaves: int = 0  # leaves of a node asked with another node's key (in impostors too)
    last_refusal: str = ""
    waiting: dict[str, list[bytes]] = field(default_factory=dict)
    batched: set[str] = field(default_factory=set)  # the waiting names that came in a batch


# Messages taken in a row before the loop lets its other tasks run. A message already queued
# is taken without yielding (pyzmq returns a finished future), so thousands of nodes
# re-sending their registrations kept the loop to this task alone: the launcher in the same
# process stopped forking node processes and did not act on SIGTERM.
_FAIR_SHARE = 16

FLUSH_MS = 1000
"""Milliseconds the closing registration socket keeps to send the answers already queued."""

# Bytes of a bootstrap frame: a guess from its neighbours, to split a host's answer into frames
# of at most MAX_FRAME / 2 without encoding every Bootstrap twice.
_BOOT_BYTES, _NEIGHBOUR_BYTES = 400, 120


class _AllowList(AsyncioAuthenticator):
    """ZAP handler: admit the allow-list's keys; a connection's User-Id is the key's name."""

    def __init__(self, ctx: zmq.asyncio.Context, allowed: dict[str, str]) -> None:
        super().__init__(ctx)
        self._names = {key.encode("ascii"): name for name, key in allowed.items()}
        self.configure_curve_callback("gossip", self)

    def callback(self, domain: str, key: bytes) -> bool:
        """Is the Z85 ``key`` in the allow-list?"""
        return key in self._names

    def curve_user_id(self, client_public_key: bytes) -> str:
        """The name the allow-list gives this (binary) key."""
        return self._names.get(z85.encode(client_public_key), "")


@contextlib.contextmanager
def bound_socket(
    ctx: zmq.asyncio.Context,
    bind: str,
    *,
    secret: str = "",
    allowed: dict[str, str] | None = None,
) -> Iterator[zmq.asyncio.Socket]:
    """Yield a ROUTER socket bound to ``bind``; on exit, close it once its queued answers went
    out (at most :data:`FLUSH_MS` ms: a node away is not waited for).

    With ``secret`` (the coordinator's Z85 secret key) and ``allowed`` (node name -> Z85
    public key) the socket is a CurveZMQ server that admits only those keys.

    Raises
    ------
    TransportError
        The address cannot be bound (in use, not local, malformed).
    """
    auth = None
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    if secret:
        # Started before the bind: a CURVE server without a ZAP handler admits any key.
        auth = _AllowList(ctx, allowed or {})
        auth.start()
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, secret.encode("ascii"))
        sock.setsockopt(zmq.ZAP_DOMAIN, b"gossip")
    try:
        sock.bind(bind)
    except zmq.ZMQError as exc:
        sock.close(0)
        if auth is not None:
            auth.stop()
        raise TransportError(
            f"cannot bind the registration socket to {bind!r}: {exc}; use a free "
            "tcp://host:port, e.g. tcp://0.0.0.0:5555"
        ) from None
    try:
        yield sock
    finally:
        # The last answers (a final report's TAKEN, a Stop) are queued, not sent, when the
        # registrar is cancelled: closed at once, they were dropped, and their nodes waited
        # for them in vain.
        sock.close(FLUSH_MS)
        if auth is not None:
            auth.stop()


def _peer_host(frame: zmq.Frame) -> str | None:
    with contextlib.suppress(zmq.ZMQError, KeyError, AttributeError, TypeError):
        host = frame.get("Peer-Address")
        return str(host) if host else None
    return None


def _user_id(frame: zmq.Frame) -> str:
    with contextlib.suppress(zmq.ZMQError, KeyError, AttributeError, TypeError):
        return str(frame.get("User-Id") or "")
    return ""


async def serve_registrations(
    sock: zmq.asyncio.Socket,
    registry: Registry,
    stats: RegistrarStats,
    on_ready: Callable[[Ready], None],
    on_change: Callable[[], None] = lambda: None,
    on_prepare: Callable[[Prepare], None] = lambda outcome: None,
    clock: Callable[[], float] = time.time,
    authenticated: bool = False,
    on_readdress: Callable[[Readdressed], None] = lambda outcome: None,
    on_leave: Callable[[str, str | None], str | None] | None = None,
    on_beat: Callable[[Beat], Message | None] | None = None,
    may_batch: Callable[[str, str], bool] | None = None,
) -> None:
    """Answer registrations on ``sock`` until cancelled.

    ``on_ready`` is called once, when the expected count is reached and every node is ready,
    before the Bootstraps go out; ``on_prepare`` before drafts go to nodes that are not ready
    (:class:`~coordinator.membership.registry.Prepare`); ``on_change`` after every accepted
    registration. ``authenticated``: the socket is a
    CURVE server (:func:`bound_socket` with keys); refuse a name that is not the key's.
    ``on_readdress`` when a restarted node registered another address, before its Bootstrap
    goes out. ``on_leave(name, sender)`` takes a :class:`Leave` (``None``: done, else why it was
    refused); ``sender`` is the name of the key it came with (``authenticated``; else ``None``),
    which must be ``name``'s own: no other node can make a node leave. Without ``on_leave``
    leaves are refused. ``on_beat`` answers a :class:`Beat` (``None``: no answer; without it
    beats go unanswered). ``may_batch(key_name, name)``: may a batch that came with that key
    register ``name`` (``authenticated`` only; without it secured batches are refused).
    """
    # Routing envelope (identity plus any delimiter frames) of the latest message under each
    # name: the node's current socket, since a restarted node has a new identity.
    envelopes: dict[str, list[bytes]] = stats.waiting

    async def ready(outcome: Ready) -> None:
        on_ready(outcome)
        await answer(outcome.bootstraps)  # every waiting node
        envelopes.clear()
        stats.batched.clear()

    async def prepare(outcome: Prepare) -> None:
        """Send the nodes that are not ready their drafts; they register again once ready."""
        on_prepare(outcome)
        await answer(outcome.drafts)
        for name in outcome.drafts:
            envelopes.pop(name, None)
            stats.batched.discard(name)

    async def answer(bootstraps: dict[str, Bootstrap]) -> None:
        """Send each named node its Bootstrap: alone, or in its batch's BootstrapBatch."""
        hosts: dict[tuple[bytes, ...], list[tuple[str, Bootstrap]]] = {}
        for name, boot in bootstraps.items():
            target = envelopes.get(name)
            if target is None:
                continue
            if name in stats.batched:
                hosts.setdefault(tuple(target), []).append((name, boot))
            else:
                stats.bootstraps_sent += 1
                await _send(sock, target, encode_bytes(boot))
        for host, pairs in hosts.items():
            await _send_batch(sock, list(host), pairs, stats)

    async def batch(
        envelope: list[bytes], msg: RegisterBatch, user: str | None, peer: str | None
    ) -> None:
        """Take a host's registrations, as lone ones would be; answer those already known."""
        if user is not None and may_batch is None:
            # Not an attack: a host of hand-made keys tries a batch first, then registers each
            # node on its own key (node.host).
            stats.last_refusal = (
                "this coordinator takes no batch of registrations (it knows no host processes; "
                "gossip up --nodes-per-process does): register each node on its own key"
            )
            log.info("refused a batch: %s", stats.last_refusal)
            await _send(sock, envelope, encode_bytes(RegisterError(stats.last_refusal)))
            return
        if user is not None and may_batch is not None:
            foreign = [r.name for r in msg.nodes if not may_batch(user, r.name)]
            if foreign:
                stats.impostors += 1
                stats.last_refusal = (
                    f"a batch under the key of {user!r} names {foreign[0]!r}"
                    + (f" and {len(foreign) - 1} more" if len(foreign) > 1 else "")
                    + ", which that key's host process does not hold; register each node on "
                    "its own key"
                )
                log.warning("refused a batch: %s", stats.last_refusal)
                await _send(sock, envelope, encode_bytes(RegisterError(stats.last_refusal)))
                return
        known: list[tuple[str, Bootstrap]] = []
        drafts: dict[str, Bootstrap] = {}
        refusal = ""
        changed = False
        for reg in msg.nodes:
            outcome = registry.register(reg, clock(), peer)
            if isinstance(outcome, Refused):
                stats.refused += 1
                refusal = refusal or f"{reg.name}: {outcome.reason}"
                log.warning("refused %s: %s", reg.name, outcome.reason)
            elif isinstance(outcome, Known):
                known.append((reg.name, outcome.bootstrap))
            elif isinstance(outcome, Readdressed):
                log.info("%s is now at %s (was %s)", reg.name, reg.address, outcome.previous)
                on_readdress(outcome)
                known.append((reg.name, outcome.bootstrap))
            else:
                envelopes[reg.name] = envelope
                stats.batched.add(reg.name)
                changed = True
                if isinstance(outcome, Ready):
                    await ready(outcome)
                elif isinstance(outcome, Prepare):
                    drafts.update(outcome.drafts)  # one answer to the host, after the loop
        if drafts:
            await prepare(Prepare(drafts))
        if refusal:
            stats.last_refusal = refusal
            await _send(sock, envelope, encode_bytes(RegisterError(refusal)))
        elif known:
            await _send_batch(sock, envelope, known, stats)
        if changed:
            on_change()

    taken = 0
    while True:
        taken += 1
        if taken % _FAIR_SHARE == 0:
            await asyncio.sleep(0)
        frames = await sock.recv_multipart(copy=False)
        stats.received += 1
        envelope = [bytes(f.bytes) for f in frames[:-1]]
        payload = frames[-1]
        try:
            msg = decode(payload.bytes)
            if not isinstance(msg, Register | RegisterBatch | Leave | Beat | BeatBatch):
                raise ProtocolError(
                    f"the coordinator only accepts register, register_batch, leave, beat and "
                    f"beat_batch messages, got {type(msg).TYPE!r}"
                )
        except ProtocolError as exc:
            stats.malformed += 1
            stats.last_refusal = f"bad message: {exc}"
            await _send(sock, envelope, encode_bytes(RegisterError(stats.last_refusal)))
            continue
        user = _user_id(payload) if authenticated else None
        if isinstance(msg, Leave):
            await _leave(sock, envelope, msg, user, stats, on_leave)
            continue
        if isinstance(msg, Beat):
            await _beat(sock, envelope, msg, user, stats, on_beat)
            continue
        if isinstance(msg, BeatBatch):
            await _beats(sock, envelope, msg, user, stats, on_beat, may_batch)
            continue
        if isinstance(msg, RegisterBatch):
            stats.batches += 1
            await batch(envelope, msg, user, _peer_host(payload))
            continue
        stats.registers += 1
        if user is not None and user != msg.name:
            stats.impostors += 1
            stats.last_refusal = (
                f"name {msg.name!r} does not match this node's key, which the allow-list "
                f"names {user!r}; start the node with that key's directory (--keys)"
            )
            log.warning("refused %s: %s", msg.name, stats.last_refusal)
            await _send(sock, envelope, encode_bytes(RegisterError(stats.last_refusal)))
            continue
        outcome = registry.register(msg, clock(), _peer_host(payload))
        if isinstance(outcome, Refused):
            stats.refused += 1
            stats.last_refusal = outcome.reason
            log.warning("refused %s: %s", msg.name, outcome.reason)
            await _send(sock, envelope, encode_bytes(RegisterError(outcome.reason)))
        elif isinstance(outcome, Known):
            stats.bootstraps_sent += 1
            await _send(sock, envelope, encode_bytes(outcome.bootstrap))
        elif isinstance(outcome, Readdressed):
            log.info("%s is now at %s (was %s)", msg.name, msg.address, outcome.previous)
            on_readdress(outcome)
            stats.bootstraps_sent += 1
            await _send(sock, envelope, encode_bytes(outcome.bootstrap))
        elif isinstance(outcome, Waiting):
            envelopes[msg.name] = envelope
            stats.batched.discard(msg.name)
            on_change()
        elif isinstance(outcome, Ready):
            envelopes[msg.name] = envelope
            stats.batched.discard(msg.name)  # this node's latest registration is a lone one
            await ready(outcome)
            on_change()
        elif isinstance(outcome, Prepare):
            envelopes[msg.name] = envelope
            stats.batched.discard(msg.name)
            await prepare(outcome)
            on_change()


async def _leave(
    sock: zmq.asyncio.Socket,
    envelope: list[bytes],
    msg: Leave,
    user: str | None,
    stats: RegistrarStats,
    on_leave: Callable[[str, str | None], str | None] | None,
) -> None:
    """Answer a :class:`Leave`: echo it if taken, else a RegisterError saying why."""
    if user is not None and user != msg.name:
        stats.forged_leaves += 1  # another node's key (or a spare's) asked: counted, and said
    why = "this coordinator takes no leaves" if on_leave is None else on_leave(msg.name, user)
    if why is None:
        await _send(sock, envelope, encode_bytes(msg))
        return
    stats.refused += 1
    stats.last_refusal = f"leave of {msg.name!r} refused: {why}"
    log.warning("%s", stats.last_refusal)
    await _send(sock, envelope, encode_bytes(RegisterError(stats.last_refusal)))


async def _beat(
    sock: zmq.asyncio.Socket,
    envelope: list[bytes],
    msg: Beat,
    user: str | None,
    stats: RegistrarStats,
    on_beat: Callable[[Beat], Message | None] | None,
) -> None:
    """Answer a :class:`Beat`: ``on_beat``'s answer, or a refusal of a beat under another
    key's name (its final report would count as another node's)."""
    if user is not None and user != msg.name:
        stats.impostors += 1
        stats.last_refusal = f"beat of {msg.name!r} came with the key of {user!r}"
        await _send(sock, envelope, encode_bytes(RegisterError(stats.last_refusal)))
        return
    answer = None if on_beat is None else on_beat(msg)
    if answer is not None:
        await _send(sock, envelope, encode_bytes(answer))


async def _beats(
    sock: zmq.asyncio.Socket,
    envelope: list[bytes],
    msg: BeatBatch,
    user: str | None,
    stats: RegistrarStats,
    on_beat: Callable[[Beat], Message | None] | None,
    may_batch: Callable[[str, str], bool] | None,
) -> None:
    """Answer a host's beats: their echoes in one BeatBatch, then a Stop (one for the whole
    batch: it names the run, not a node) and any refusal. Secured, a batch under a key that
    may not beat for every name in it is refused whole, as a lone impostor's beat is."""
    if user is not None and any(
        may_batch is None or not may_batch(user, b.name) for b in msg.beats
    ):
        stats.impostors += 1
        stats.last_refusal = f"beats of other processes' nodes came with the key of {user!r}"
        await _send(sock, envelope, encode_bytes(RegisterError(stats.last_refusal)))
        return
    if on_beat is None:
        return
    echoes: list[Beat] = []
    stop: Message | None = None
    refusals: list[Message] = []
    for beat in msg.beats:
        answer = on_beat(beat)
        if isinstance(answer, Beat):
            echoes.append(answer)
        elif isinstance(answer, RegisterError):
            refusals.append(answer)
        elif answer is not None:
            stop = answer
    if echoes:
        await _send(sock, envelope, encode_bytes(BeatBatch(tuple(echoes))))
    for answer in [*([] if stop is None else [stop]), *refusals]:
        await _send(sock, envelope, encode_bytes(answer))


async def _send_batch(
    sock: zmq.asyncio.Socket,
    envelope: list[bytes],
    pairs: list[tuple[str, Bootstrap]],
    stats: RegistrarStats,
) -> None:
    """Send a host's Bootstraps as BootstrapBatch frames of at most about MAX_FRAME / 2."""
    start, size = 0, 0
    for k, (_, boot) in enumerate(pairs):
        size += _BOOT_BYTES + _NEIGHBOUR_BYTES * len(boot.neighbors)
        last = k == len(pairs) - 1
        if last or size + _BOOT_BYTES + _NEIGHBOUR_BYTES * len(pairs[k + 1][1].neighbors) > (
            MAX_FRAME // 2
        ):
            part = pairs[start : k + 1]
            names = tuple(name for name, _ in part)
            boots = tuple(boot for _, boot in part)
            stats.bootstraps_sent += len(part)
            await _send(sock, envelope, encode_bytes(BootstrapBatch(names, boots)))
            start, size = k + 1, 0


async def _send(sock: zmq.asyncio.Socket, envelope: list[bytes], payload: bytes) -> None:
    try:
        await sock.send_multipart([*envelope, payload])
    except zmq.ZMQError as exc:
        # The peer went away (ROUTER drops or refuses unroutable frames); it re-sends its
        # registration if it still cares, so nothing is lost.
        log.debug("could not answer a registration: %s", exc)
    await asyncio.sleep(0)
