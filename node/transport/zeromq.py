"""The ZeroMQ transport: one ROUTER to serve, one DEALER per peer to initiate.

DEALER/ROUTER instead of REQ/REP: a REQ socket is stuck in lockstep after a lost reply, while
a DEALER can have any number of requests in flight and re-send one at will. Requests arrive on
the ROUTER as ``[identity, frame]`` and answers go back on the ROUTER to that identity, so a
peer needs no route back to us other than the connection it opened.

Waiting costs one wake-up per burst: each socket's notification descriptor (``zmq.FD``) is
watched by the event loop (``add_reader``), and the callback drains *that* socket at once into
a queue that :meth:`ZmqTransport.recv` serves; after every send the socket is checked (and
drained) again, since a send can consume the descriptor's edge. Why, and what the other ways
cost: docs/performance.md, "Waiting on ZeroMQ sockets".
Sends are non-blocking too: a frame that cannot be queued (peer's queue full) is dropped and
counted, and the protocol's retry covers it. zmq errors become :class:`TransportError` here.

With ``keys`` every socket uses CurveZMQ (:mod:`node.transport.curve`): the ROUTER admits only the
keys given to :meth:`ZmqTransport.trust` (the neighbours', from the bootstrap) and each frame it
receives carries the node id of the key its connection was authenticated with
(:attr:`Incoming.sender`); a DEALER's answers come from the one neighbour whose key it checked.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import cast

import zmq

from continuized.gossip.errors import ConfigError, TransportError
from continuized.gossip.wire.schema import Buffer, Frame
from continuized.node.transport.addresses import advertised_address
from continuized.node.transport.colocation import INPROC_PREFIX, Colocation
from continuized.node.transport.curve import (
    HOLD_UNTRUSTED,
    CurveKeys,
)
from continuized.node.transport.departures import Departures
from continuized.node.transport.interface import FrameHandler, Incoming, Transport, TransportStats
from continuized.node.transport.sockets import peer_socket, server_socket

__all__ = ["ZmqTransport"]

# Seconds between a redial of a peer still silent and the next, doubling each time up to
# _REDIAL_MAX. A redial replaces a handshake that may still be under way by a new one: 4,096
# secure nodes on 2 cores, redialling after a second of silence, redialled 23,443 times and
# never caught up.
_REDIAL_BACKOFF = 1.0
_REDIAL_MAX = 16.0


# Plain ints: zmq's constants are enum members, and enum arithmetic costs microseconds on a
# path taken several times per exchange.
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE_NOBLOCK = int(zmq.SNDMORE) | _NOBLOCK
_RCVMORE = int(zmq.RCVMORE)


def _raw_parts(sock: zmq.Socket[bytes]) -> list[memoryview]:
    """The rest of a multipart message, as views of ZeroMQ's own buffers (no copy)."""
    parts = [sock.recv(_NOBLOCK, copy=False).buffer]
    while sock.get(_RCVMORE):
        parts.append(sock.recv(_NOBLOCK, copy=False).buffer)
    return parts


def _readable(sock: zmq.Socket[bytes]) -> bool:
    return bool(cast(int, sock.getsockopt(_EVENTS)) & _POLLIN)


class ZmqTransport(Transport):
    """ZeroMQ DEALER/ROUTER transport. ``bind`` is a zmq endpoint, e.g. ``tcp://0.0.0.0:0``.

    Create it inside a running event loop.

    Parameters
    ----------
    bind : str
        Where the ROUTER binds; port 0 picks a free port.
    advertise : str or None
        Host name or IP peers should use (see :func:`advertised_address`).
    toward : str or None
        The coordinator's address, used to pick the advertised interface.
    context : zmq.Context or None
        A shared context (default: a new one, terminated on close).
    keys : CurveKeys or None
        This node's CURVE key pair: authenticate every connection (``None``: plain sockets).
    hold : float
        Seconds this node's server holds a handshake whose key it does not know yet (see
        :mod:`node.transport.curve`); the peers hold as long, so a DEALER is never dialled again
        sooner.
    colocation : Colocation or None
        The servers of this process (same ``context``): serve them, and reach them, over
        ``inproc`` (:mod:`node.transport.colocation`).
    """

    def __init__(
        self,
        bind: str = "tcp://0.0.0.0:0",
        advertise: str | None = None,
        toward: str | None = None,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
        keys: CurveKeys | None = None,
        hold: float = HOLD_UNTRUSTED,
        colocation: Colocation | None = None,
    ):
        self.stats = TransportStats()
        self._loop = asyncio.get_running_loop()
        self._departures = Departures()
        self._own_context = context is None
        self._ctx: zmq.Context[zmq.Socket[bytes]] = context or zmq.Context()
        self._keys = keys
        self._hold = hold
        self._peer_keys: dict[int, str] = {}
        try:
            self._router, endpoint, self._auth = server_socket(self._ctx, bind, keys, hold)
        except ConfigError:
            if self._own_context:
                self._ctx.term()
            raise
        self._address = advertised_address(endpoint, advertise, toward)
        self._colocation = colocation
        self._inproc: str | None = None  # our endpoint for colocated peers
        self._inproc_peers: set[int] = set()  # peers dialled over inproc
        if colocation is not None:
            self._inproc = colocation.claim()
            self._router.bind(self._inproc)
            colocation.add(self._address, self._inproc)
        self._dealers: dict[int, zmq.Socket[bytes]] = {}
        self._peer_of: dict[zmq.Socket[bytes], int] = {}  # dealer -> the peer it reaches
        self._heard: set[zmq.Socket[bytes]] = set()  # dealers that received a frame
        # peer -> (redials since its address was given, the last dial): see redial()
        self._redialed: dict[int, tuple[int, float]] = {}
        self._addresses: dict[int, str] = {}
        self._ready: deque[Incoming] = deque()
        self._waiter: asyncio.Future[None] | None = None  # recv() waiting for a frame
        self._error: Exception | None = None  # raised by the next recv()
        self._handler: FrameHandler | None = None  # frames go straight to it (set_handler)
        self._dispatching = False  # inside the handler: frames read meanwhile wait in order
        self._backlog: deque[tuple[Frame, bytes | None, int | None]] = deque()
        self._draining_router = False  # inside the ROUTER's drain loop (see answer)
        self._router_drain: Callable[[zmq.Socket[bytes]], None] = (
            self._drain_router if keys is None else self._drain_router_authenticated
        )
        self._watch(self._router)
        self._closed = False

    def _watch(self, sock: zmq.Socket[bytes]) -> None:
        drain = self._router_drain if sock is self._router else self._drain_dealer
        self._loop.add_reader(cast(int, sock.getsockopt(zmq.FD)), drain, sock)

    def _unwatch(self, sock: zmq.Socket[bytes]) -> None:
        self._loop.remove_reader(cast(int, sock.getsockopt(zmq.FD)))

    @property
    def address(self) -> str:
        """``tcp://host:port`` where peers reach this node's ROUTER."""
        return self._address

    @property
    def secure(self) -> bool:
        """Whether every connection is authenticated (CurveZMQ)."""
        return self._keys is not None

    @property
    def denied(self) -> int:
        """Connections refused so far because their key is not a neighbour's."""
        return 0 if self._auth is None else self._auth.denied

    @property
    def held(self) -> int:
        """Handshakes held until this server's first allow-list (:mod:`node.transport.curve`)."""
        return 0 if self._auth is None else self._auth.held

    def trust(self, peer_keys: Mapping[int, str]) -> None:
        """Admit exactly these peers (node id -> Z85 public key) on the ROUTER from now on.

        Raises
        ------
        ConfigError
            The transport is not secure, or a key is missing.
        """
        if self._auth is None:
            raise ConfigError("trust() needs a secure transport (ZmqTransport(keys=...))")
        missing = sorted(peer for peer, key in peer_keys.items() if not key)
        if missing:
            raise ConfigError(
                f"no public key for neighbour(s) {missing}; the coordinator must run with keys "
                "(gossip coordinator --keys) when the nodes do"
            )
        self._peer_keys = dict(peer_keys)
        self._auth.set_allowed({key: str(peer) for peer, key in peer_keys.items()})

    async def connect(self, peers: Mapping[int, str]) -> None:
        """Connect a DEALER to each peer's ROUTER (again, if its address changed)."""
        for peer, address in peers.items():
            self.move(peer, address)

    def move(self, peer: int, address: str) -> bool:
        """Connect ``peer``'s DEALER to ``address`` instead (see :meth:`Transport.move`).

        A new DEALER, not a disconnect and connect of the old one: frames the old one still
        queued for the dead address are dropped with it rather than sent to the new one
        (the protocol re-sends what is still pending), and answers to the old connection
        cannot come in on the new one. ``self._dealers[peer]`` is replaced at once, so every
        later send, retries included, goes to the new address.

        Raises
        ------
        ConfigError
            Secure transport and no key for ``peer`` (see :meth:`trust`).
        TransportError
            zmq cannot connect to ``address`` (malformed).
        """
        if self._addresses.get(peer) == address:
            return False
        self._dial(peer, address)
        self._redialed[peer] = (0, time.monotonic())  # a new handshake, with a new process
        return True

    def redial(self, peer: int) -> bool:
        """Replace ``peer``'s DEALER by a new one to the same address if its CURVE handshake
        may have been refused; return whether it did (see :meth:`Transport.redial`).

        A DEALER whose handshake was refused is closed by libzmq for good, and frames sent to
        it queue without a word: only a new socket shakes hands again. A peer refuses only a
        key it has held for its whole hold (:mod:`node.transport.curve`), so a DEALER is dialled
        again only once it has been silent that long since its dial, and, if still silent, again
        after a pause that doubles each time (1 s, 2 s, ... 16 s). One that has heard from
        its peer is left alone: its peer is slow, and libzmq reconnects a TCP connection that
        broke by itself. A plain DEALER is never refused, so never dialled again.
        """
        address = self._addresses.get(peer)
        dealer = self._dealers.get(peer)
        if self._keys is None or address is None or dealer is None or dealer in self._heard:
            return False
        if peer in self._inproc_peers:
            return False  # no handshake to be refused
        count, last = self._redialed.get(peer, (0, -math.inf))
        pause = self._hold if not count else min(_REDIAL_BACKOFF * 2 ** (count - 1), _REDIAL_MAX)
        now = time.monotonic()
        if now - last < pause:
            return False  # the handshake may still be under way, or held
        self._dial(peer, address)
        self._redialed[peer] = (count + 1, now)
        self.stats.extra["redialed"] = self.stats.extra.get("redialed", 0) + 1
        return True

    def _dial(self, peer: int, address: str) -> None:
        local = None if self._colocation is None else self._colocation.endpoint(address)
        dealer = peer_socket(
            self._ctx, peer, self._keys, self._peer_keys.get(peer), inproc=local is not None
        )
        try:
            dealer.connect(address if local is None else local)
        except zmq.ZMQError as exc:
            dealer.close(0)  # the old route, if any, stays as it was
            raise TransportError(f"cannot connect to peer {peer} at {address!r}: {exc}") from None
        old = self._dealers.pop(peer, None)
        if old is not None:
            self._unwatch(old)
            self._peer_of.pop(old, None)
            self._heard.discard(old)
            old.close(0)
        self._dealers[peer] = dealer
        self._peer_of[dealer] = peer
        self._addresses[peer] = address
        if local is None:
            self._inproc_peers.discard(peer)
        else:
            self._inproc_peers.add(peer)
        self.stats.extra["inproc_peers"] = len(self._inproc_peers)
        self._watch(dealer)
        self._drain_dealer(dealer)  # its FD may already have consumed its edge

    def send(self, peer: int, data: Frame) -> None:
        """Queue ``data`` on the DEALER to ``peer``; drop it if the queue is full.

        A multipart frame's raw parts go without a copy: ``copy=False`` has pyzmq hand ZeroMQ
        the arrays' own buffers (parts under its 64 kB threshold are still copied, which is
        cheaper for them). With pyzmq's default ``copy=True`` every part is copied, a whole
        pass over a model's parameters per send. ZeroMQ queues a multipart message whole or
        not at all. The encoder's arrays are never written after a send (the exchange builds
        new ones for every frame), which is what zero-copy needs.
        """
        sock = self._dealers.get(peer)
        if sock is None:
            self.stats.dropped += 1
            return
        try:
            if isinstance(data, bytes):
                sock.send(data, _NOBLOCK)
            else:
                self._departures.track(sock.send_multipart(data, _NOBLOCK, copy=False, track=True))
            self.stats.sent += 1
        except zmq.Again:
            self.stats.dropped += 1
        except zmq.ZMQError as exc:
            raise TransportError(f"send to peer {peer} failed: {exc}") from None
        self._drain_dealer(sock)  # the send may have eaten the FD's edge

    def answer(self, route: bytes, data: Frame) -> None:
        """Send ``data`` back on the ROUTER to the DEALER whose identity is ``route``."""
        router = self._router
        try:
            # Two sends rather than send_multipart, whose per-part checks cost more than the
            # sends on this path (a ROUTER queues a message whole, or drops it whole).
            router.send(route, _SNDMORE_NOBLOCK)
            if isinstance(data, bytes):
                router.send(data, _NOBLOCK)
            else:
                for part in data[:-1]:  # zero-copy for the raw parts, as in send()
                    router.send(part, _SNDMORE_NOBLOCK, copy=False)
                self._departures.track(router.send(data[-1], _NOBLOCK, copy=False, track=True))
            self.stats.sent += 1
        except zmq.ZMQError:
            self.stats.dropped += 1  # full, or that peer is gone: it asks again if it cares
        if not self._draining_router:  # else the drain's own loop checks the socket next
            self._router_drain(self._router)

    def when_sent(self, work: Callable[[], None]) -> None:
        """Run ``work`` once ZeroMQ has let go of the last zero-copy frame sent
        (:mod:`node.transport.departures`); at once if every frame sent was copied."""
        self._departures.then(work)

    async def recv(self) -> Incoming:
        """Return the next frame from the ROUTER (a request) or a DEALER (an answer)."""
        while not self._ready:
            if self._error is not None:
                raise self._error
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        self.stats.received += 1
        return self._ready.popleft()

    def set_handler(self, handler: FrameHandler | None) -> bool:
        """Hand frames straight to ``handler`` from the socket callbacks (see
        :meth:`Transport.set_handler`); frames already queued go to it first, in order."""
        self._handler = handler
        if handler is not None:
            while self._ready:
                incoming = self._ready.popleft()
                self._deliver(incoming.data, incoming.route, incoming.sender)
        return True

    def _deliver(self, data: Frame, route: bytes | None, sender: int | None = None) -> None:
        handler = self._handler
        if handler is None:
            self._ready.append(Incoming(data, route, sender))
            self._wake()
        elif self._dispatching:
            # The handler is sending, and a send drains its socket: what that read waits
            # for the handler to return rather than running inside it (no re-entry).
            self._backlog.append((data, route, sender))
        else:
            self._dispatching = True
            stats = self.stats
            try:
                stats.received += 1
                handler(data, route, sender)
                backlog = self._backlog
                while backlog:
                    data, route, sender = backlog.popleft()
                    stats.received += 1
                    handler(data, route, sender)
            except Exception as exc:
                # Called from the event loop's reader callback, where an exception would only
                # be logged: the node's receive task raises it from recv() instead.
                self._backlog.clear()
                self._error = exc
                self._wake()
            finally:
                self._dispatching = False

    def _drain_router(self, router: zmq.Socket[bytes]) -> None:
        deliver = self._deliver
        self._draining_router = True
        try:
            while _readable(router):
                route = router.recv(_NOBLOCK)
                if not router.get(_RCVMORE):  # a lone frame leaves no usable route
                    deliver(route, None)
                    continue
                payload = router.recv(_NOBLOCK)
                if router.get(_RCVMORE):
                    if payload:  # [identity, map, raw parts]: a multipart frame
                        deliver((payload, *_raw_parts(router)), route)
                        continue
                    # A REQ peer's extra delimiter frame leaves no usable route.
                    payload = b"".join(bytes(part) for part in _raw_parts(router))
                    deliver(payload, None)
                    continue
                deliver(payload, route)
        except zmq.ZMQError as exc:
            self._fail(exc)
        finally:
            self._draining_router = False

    def _drain_router_authenticated(self, router: zmq.Socket[bytes]) -> None:
        # Frames (copy=False) carry their connection's ZAP User-Id: the sender's node id.
        deliver = self._deliver
        self._draining_router = True
        try:
            while _readable(router):
                frames = router.recv_multipart(_NOBLOCK, copy=False)
                payload = frames[-1] if len(frames) <= 2 or not frames[1].bytes else frames[1]
                sender = self._sender(frames[0].bytes, payload)
                if len(frames) > 2 and frames[1].bytes:  # [identity, map, raw parts]
                    parts: tuple[Buffer, ...] = (
                        frames[1].bytes,
                        *(f.buffer for f in frames[2:]),
                    )
                    deliver(parts, frames[0].bytes, sender)
                    continue
                route = frames[0].bytes if len(frames) == 2 else None
                deliver(payload.bytes, route, sender)
        except zmq.ZMQError as exc:
            self._fail(exc)
        finally:
            self._draining_router = False

    def _sender(self, route: bytes, payload: zmq.Frame) -> int:
        """The node id a secure server's frame comes from: its connection's ZAP ``User-Id``,
        or, over ``inproc`` (no handshake, no ``User-Id``), the key in its routing id
        (:mod:`node.transport.colocation`); -1 if neither is a neighbour's."""
        user: int | str | None
        try:
            user = payload.get("User-Id")
        except zmq.ZMQError:  # no metadata: not a network connection
            claimed = None
            if self._auth is not None and route[:1] == INPROC_PREFIX:
                claimed = self._auth.user_of(route[len(INPROC_PREFIX) :])
            user = None if claimed is None else claimed.decode("ascii", "replace")
        return int(user) if isinstance(user, str) and user.isdigit() else -1

    def _drain_dealer(self, dealer: zmq.Socket[bytes]) -> None:
        deliver = self._deliver
        # A secure DEALER checked its server's key: its frames come from that peer.
        sender = self._peer_of.get(dealer) if self._keys is not None else None
        try:
            if _readable(dealer):
                if dealer not in self._heard:  # answered: a later silence starts afresh
                    self._redialed.pop(self._peer_of.get(dealer, -1), None)
                self._heard.add(dealer)
                while True:
                    data = dealer.recv(_NOBLOCK)
                    if dealer.get(_RCVMORE):  # a multipart frame: its raw parts follow
                        parts: tuple[Buffer, ...] = (data, *_raw_parts(dealer))
                        deliver(parts, None, sender)
                    else:
                        deliver(data, None, sender)
                    if not _readable(dealer):
                        break
        except zmq.ZMQError as exc:
            self._fail(exc)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, exc: zmq.ZMQError) -> None:
        # Called from the event loop's reader callback: hand the error to the receiver.
        self._error = TransportError(f"receiving on the node's sockets failed: {exc}")
        self._wake()

    async def aclose(self) -> None:
        """Close every socket (unsent frames are dropped) and the context if we made it."""
        if self._closed:
            return
        self._closed = True
        self._departures.close()
        for dealer in self._dealers.values():
            self._unwatch(dealer)
            dealer.close(0)
        self._unwatch(self._router)
        self._router.close(0)
        if self._colocation is not None and self._inproc is not None:
            self._colocation.remove(self._address, self._inproc)
        if self._auth is not None:
            self._auth.close()
        if self._own_context:
            self._ctx.term()
