"""The ZeroMQ transport: one ROUTER to serve, one DEALER per peer to initiate.

DEALER/ROUTER instead of REQ/REP: a REQ socket is stuck in lockstep after a lost reply, while
a DEALER can have any number of requests in flight and re-send one at will. Requests arrive on
the ROUTER as ``[identity, frame]`` and answers go back on the ROUTER to that identity, so a
peer needs no route back to us other than the connection it opened.

Waiting uses :class:`zmq.asyncio.Poller` over every socket; once woken, each ready socket is
drained with non-blocking reads on its synchronous shadow, so a burst costs one wake-up.
Sends are non-blocking too: a frame that cannot be queued (peer's queue full) is dropped and
counted, and the protocol's retry covers it. zmq errors become :class:`TransportError` here.
"""

from __future__ import annotations

import socket as pysocket
from collections import deque
from collections.abc import Mapping
from urllib.parse import urlsplit

import zmq
import zmq.asyncio

from gossip.errors import ConfigError, TransportError
from node.transport import Incoming, Transport, TransportStats

__all__ = ["ZmqTransport", "advertised_address"]

_HWM = 10_000  # frames queued per socket before sends are dropped


def advertised_address(bound: str, advertise: str | None, toward: str | None = None) -> str:
    """Return the address peers should use to reach a socket bound at ``bound``.

    ``bound`` is the socket's actual endpoint (``tcp://0.0.0.0:41234``). A wildcard host is
    replaced by ``advertise`` if given, else by the local address used to reach ``toward`` (the
    coordinator: its interface is the one the peers share), else by this host's name.

    Examples
    --------
    >>> advertised_address("tcp://0.0.0.0:5000", "10.0.0.7")
    'tcp://10.0.0.7:5000'
    >>> advertised_address("tcp://127.0.0.1:5000", None)
    'tcp://127.0.0.1:5000'
    """
    parts = urlsplit(bound)
    host, port = parts.hostname or "", parts.port
    if advertise:
        host = advertise
    elif host in ("", "0.0.0.0", "*", "::"):
        host = _route_to(toward) or pysocket.gethostname()
    return f"{parts.scheme}://{host}:{port}"


def _route_to(toward: str | None) -> str | None:
    if not toward:
        return None
    parts = urlsplit(toward)
    if not parts.hostname:
        return None
    try:
        # A UDP "connect" sends nothing; it only asks the kernel which interface it would use.
        with pysocket.socket(pysocket.AF_INET, pysocket.SOCK_DGRAM) as probe:
            probe.connect((parts.hostname, parts.port or 1))
            return str(probe.getsockname()[0])
    except OSError:
        return None


class ZmqTransport(Transport):
    """ZeroMQ DEALER/ROUTER transport. ``bind`` is a zmq endpoint, e.g. ``tcp://0.0.0.0:0``.

    Parameters
    ----------
    bind : str
        Where the ROUTER binds; port 0 picks a free port.
    advertise : str or None
        Host name or IP peers should use (see :func:`advertised_address`).
    toward : str or None
        The coordinator's address, used to pick the advertised interface.
    context : zmq.asyncio.Context or None
        A shared context (default: a new one, terminated on close).
    """

    def __init__(
        self,
        bind: str = "tcp://0.0.0.0:0",
        advertise: str | None = None,
        toward: str | None = None,
        context: zmq.asyncio.Context | None = None,
    ):
        self.stats = TransportStats()
        self._own_context = context is None
        self._ctx = context or zmq.asyncio.Context()
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        self._router.setsockopt(zmq.SNDHWM, _HWM)
        self._router.setsockopt(zmq.RCVHWM, _HWM)
        try:
            if bind.startswith("tcp://") and bind.rsplit(":", 1)[-1] in ("0", "*"):
                host = urlsplit(bind).hostname or "0.0.0.0"
                port = self._router.bind_to_random_port(f"tcp://{host}")
                endpoint = f"tcp://{host}:{port}"
            else:
                self._router.bind(bind)
                endpoint = self._router.getsockopt_string(zmq.LAST_ENDPOINT)
        except zmq.ZMQError as exc:
            self._router.close(0)
            if self._own_context:
                self._ctx.term()
            raise ConfigError(
                f"cannot bind the node's server to {bind!r}: {exc}; use tcp://HOST:PORT, "
                "port 0 for any free port"
            ) from None
        self._address = advertised_address(endpoint, advertise, toward)
        self._router_sync: zmq.Socket[bytes] = zmq.Socket.shadow(self._router.underlying)
        self._dealers: dict[int, zmq.asyncio.Socket] = {}
        self._dealers_sync: dict[int, zmq.Socket[bytes]] = {}
        self._addresses: dict[int, str] = {}
        self._poller = zmq.asyncio.Poller()
        self._poller.register(self._router, zmq.POLLIN)
        self._shadows: dict[zmq.asyncio.Socket, zmq.Socket[bytes]] = {}  # DEALERs only
        self._ready: deque[Incoming] = deque()
        self._closed = False

    @property
    def address(self) -> str:
        """``tcp://host:port`` where peers reach this node's ROUTER."""
        return self._address

    async def connect(self, peers: Mapping[int, str]) -> None:
        """Connect a DEALER to each peer's ROUTER (again, if its address changed)."""
        for peer, address in peers.items():
            if self._addresses.get(peer) == address:
                continue
            old = self._dealers.pop(peer, None)
            if old is not None:
                self._poller.unregister(old)
                self._shadows.pop(old, None)
                old.close(0)
            dealer = self._ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.setsockopt(zmq.SNDHWM, _HWM)
            dealer.setsockopt(zmq.RCVHWM, _HWM)
            try:
                dealer.connect(address)
            except zmq.ZMQError as exc:
                dealer.close(0)
                raise TransportError(
                    f"cannot connect to peer {peer} at {address!r}: {exc}"
                ) from None
            self._dealers[peer] = dealer
            self._dealers_sync[peer] = zmq.Socket.shadow(dealer.underlying)
            self._shadows[dealer] = self._dealers_sync[peer]
            self._addresses[peer] = address
            self._poller.register(dealer, zmq.POLLIN)

    def send(self, peer: int, data: bytes) -> None:
        """Queue ``data`` on the DEALER to ``peer``; drop it if the queue is full."""
        sock = self._dealers_sync.get(peer)
        if sock is None:
            self.stats.dropped += 1
            return
        try:
            sock.send(data, zmq.NOBLOCK, copy=len(data) < 4096)
            self.stats.sent += 1
        except zmq.Again:
            self.stats.dropped += 1
        except zmq.ZMQError as exc:
            raise TransportError(f"send to peer {peer} failed: {exc}") from None

    def answer(self, route: bytes, data: bytes) -> None:
        """Send ``data`` back on the ROUTER to the DEALER whose identity is ``route``."""
        try:
            self._router_sync.send_multipart([route, data], zmq.NOBLOCK)
            self.stats.sent += 1
        except zmq.Again:
            self.stats.dropped += 1
        except zmq.ZMQError:
            self.stats.dropped += 1  # that peer is gone: it will ask again if it cares

    async def recv(self) -> Incoming:
        """Return the next frame from the ROUTER (a request) or a DEALER (an answer)."""
        while not self._ready:
            try:
                events = await self._poller.poll()
            except zmq.ZMQError as exc:
                raise TransportError(f"polling the node's sockets failed: {exc}") from None
            for sock, _ in events:
                self._drain(sock)
        self.stats.received += 1
        return self._ready.popleft()

    def _drain(self, sock: object) -> None:
        if sock is self._router:
            while True:
                try:
                    frames = self._router_sync.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    return
                # [identity, payload]; anything else (a REQ's delimiter) is answered as is
                # only if we can: keep the last frame as the payload, the rest as the route.
                if len(frames) == 2:
                    self._ready.append(Incoming(frames[1], frames[0]))
                else:
                    self._ready.append(Incoming(frames[-1], None))
            return
        sync = self._shadows.get(sock)  # type: ignore[call-overload]
        while sync is not None:
            try:
                self._ready.append(Incoming(sync.recv(zmq.NOBLOCK), None))
            except zmq.Again:
                return

    async def aclose(self) -> None:
        """Close every socket (unsent frames are dropped) and the context if we made it."""
        if self._closed:
            return
        self._closed = True
        for dealer in self._dealers.values():
            dealer.close(0)
        self._router.close(0)
        if self._own_context:
            self._ctx.term()
