"""An in-memory transport: nodes in one process, joined by a :class:`FakeNetwork`.

It behaves like the ZeroMQ transport (requests carry a route, answers come back on it, sends
never block) without sockets, so tests can run a whole cluster in one event loop, and users
can experiment with the protocol. Wrap it in :class:`node.transport.faults.FaultyTransport` to drop,
duplicate, delay and reorder frames.

Examples
--------
>>> net = FakeNetwork()
>>> a, b = net.endpoint("mem://a"), net.endpoint("mem://b")
>>> a.address
'mem://a'
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.schema import Frame
from continuized.node.transport.interface import Incoming, Transport, TransportStats

__all__ = ["FakeNetwork", "FakeTransport"]


class FakeNetwork:
    """The switch of in-memory endpoints, by address."""

    def __init__(self) -> None:
        self._endpoints: dict[str, FakeTransport] = {}

    def endpoint(self, address: str) -> FakeTransport:
        """Create the endpoint at ``address`` (each address once)."""
        if address in self._endpoints:
            raise ConfigError(f"address {address!r} is already taken on this fake network")
        transport = FakeTransport(self, address)
        self._endpoints[address] = transport
        return transport

    def deliver(self, address: str, incoming: Incoming) -> bool:
        """Queue ``incoming`` at ``address``; False if nothing listens there."""
        target = self._endpoints.get(address)
        if target is None or target.closed:
            return False
        target.inbox.put_nowait(incoming)
        return True

    def remove(self, address: str) -> None:
        """Forget the endpoint at ``address`` (it closed)."""
        self._endpoints.pop(address, None)


class FakeTransport(Transport):
    """One node's endpoint on a :class:`FakeNetwork`; routes are the sender's address."""

    def __init__(self, network: FakeNetwork, address: str):
        self.stats = TransportStats()
        self.network = network
        self.inbox: asyncio.Queue[Incoming] = asyncio.Queue()
        self.closed = False
        self._address = address
        self._peers: dict[int, str] = {}

    @property
    def address(self) -> str:
        """This endpoint's address."""
        return self._address

    async def connect(self, peers: Mapping[int, str]) -> None:
        """Remember the peers' addresses."""
        self._peers.update(peers)

    def move(self, peer: int, address: str) -> bool:
        """Send to ``peer`` at ``address`` from now on."""
        changed = self._peers.get(peer) != address
        self._peers[peer] = address
        return changed

    def send(self, peer: int, data: Frame) -> None:
        """Deliver a request to ``peer``, with our address as the route back."""
        address = self._peers.get(peer)
        if address is not None and self.network.deliver(
            address, Incoming(data, self._address.encode())
        ):
            self.stats.sent += 1
        else:
            self.stats.dropped += 1

    def answer(self, route: bytes, data: Frame) -> None:
        """Deliver an answer to the endpoint ``route`` names."""
        if self.network.deliver(route.decode(), Incoming(data, None)):
            self.stats.sent += 1
        else:
            self.stats.dropped += 1

    async def recv(self) -> Incoming:
        """Wait for the next frame."""
        incoming = await self.inbox.get()
        self.stats.received += 1
        return incoming

    async def aclose(self) -> None:
        """Leave the network; frames still queued here are dropped."""
        self.closed = True
        self.network.remove(self._address)
