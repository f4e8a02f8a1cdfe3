"""The transport interface a node talks through: frames to peers' servers, answers back.

A node has one *server* endpoint (its address) that peers send requests to, and sends its own
requests to each peer's server. Each frame that arrives carries a *route*: an opaque handle to
answer a request on (``None`` for frames that are themselves answers). The exchange protocol
(:mod:`gossip.exchange.exchanger`) only ever sees frames (bytes, or a map and raw parts:
:data:`gossip.wire.schema.Frame`); this interface only ever moves them.

Implementations: :class:`node.transport.zeromq.ZmqTransport` (ZeroMQ DEALER/ROUTER, the real one),
:class:`node.transport.fake.FakeTransport` (in memory, for tests and experiments) and
:class:`node.transport.faults.FaultyTransport` (wraps either, and drops, duplicates and delays
frames).

Sends never block and never raise on a full or absent peer: the protocol's retries cover a
lost frame, so a transport may drop one rather than stall the node.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.schema import Frame

__all__ = ["FrameHandler", "Incoming", "Transport", "TransportStats"]

FrameHandler = Callable[[Frame, "bytes | None", "int | None"], None]
"""Called with each frame's bytes, route (``None``: an answer) and authenticated sender
(``None``: not authenticated, see :attr:`Incoming.sender`); see :meth:`Transport.set_handler`."""


@dataclass(frozen=True, slots=True)
class Incoming:
    """One frame received: its bytes, and the route to answer it on (``None``: an answer).

    ``sender`` is the node id authenticated on the frame's connection (CurveZMQ), or ``None``
    when the transport does not authenticate its peers.
    """

    data: Frame
    route: bytes | None
    sender: int | None = None


@dataclass(slots=True)
class TransportStats:
    """Frame counts of a transport (and of fault injection, when wrapped)."""

    sent: int = 0
    received: int = 0
    dropped: int = 0  # not sent: the peer's queue was full, or a fault dropped it
    duplicated: int = 0  # sent twice by fault injection
    delayed: int = 0  # held back by fault injection
    extra: dict[str, int] = field(default_factory=dict)


class Transport(ABC):
    """Moves frames between a node and its peers. Use as an async context manager."""

    stats: TransportStats

    @property
    @abstractmethod
    def address(self) -> str:
        """The address peers reach this node's server at (what the node registers)."""

    @abstractmethod
    async def connect(self, peers: Mapping[int, str]) -> None:
        """Open the way to each peer's server (``peer id -> address``); may be called again."""

    @abstractmethod
    def move(self, peer: int, address: str) -> bool:
        """Send to ``peer`` at ``address`` from now on (it came back there); return whether
        that changed its address. Frames queued for the old one may be dropped (the
        protocol's retries cover them); frames sent from now on, retries included, go to the
        new one. Synchronous: called from the frame handler.
        """

    def redial(self, peer: int) -> bool:
        """``peer`` has left an exchange unanswered for long (the protocol's
        :meth:`~gossip.exchange.exchanger.Exchanger.take_silent`): open the way to it again if
        nothing ever came back on the current one; return whether it did.

        For transports whose connections can die silently for good (a refused CurveZMQ
        handshake is never retried: :mod:`node.transport.curve`). The default does nothing.
        """
        return False

    @abstractmethod
    def send(self, peer: int, data: Frame) -> None:
        """Send a frame to ``peer``'s server, without blocking; drop it if it cannot go now."""

    @abstractmethod
    def answer(self, route: bytes, data: Frame) -> None:
        """Send an answer back on ``route`` (from :class:`Incoming`), without blocking."""

    def when_sent(self, work: Callable[[], None]) -> None:
        """Run ``work`` once the frames sent so far have left this process's hands, so that
        it does not hold them back (:mod:`node.transport.departures`). The default runs it now."""
        work()

    @abstractmethod
    async def recv(self) -> Incoming:
        """Wait for the next frame: a request to our server, or an answer from a peer."""

    def set_handler(self, handler: FrameHandler | None) -> bool:
        """Hand every frame to ``handler`` as it is read, instead of queueing it for
        :meth:`recv` (``None``: queue again). Returns False if this transport cannot.

        A handler saves a future and a task switch per frame; :meth:`recv` then only raises
        the transport's errors. The handler must not raise.
        """
        return False

    @property
    def secure(self) -> bool:
        """Whether every connection is authenticated (then :meth:`trust` says by whom)."""
        return False

    def trust(self, peer_keys: Mapping[int, str]) -> None:
        """Admit exactly these peers (node id -> public key) from now on (secure transports).

        Raises
        ------
        ConfigError
            This transport is not secure.
        """
        raise ConfigError(f"trust() needs a secure transport, not {type(self).__name__}")

    @abstractmethod
    async def aclose(self) -> None:
        """Close every socket; frames not yet sent are dropped."""

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
