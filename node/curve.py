"""CurveZMQ for the node's sockets: its key pair, and who may connect (ZAP).

Ironhouse: both ends of every connection are authenticated. A node's ROUTER is a CURVE server
that admits only the public keys of its neighbours and labels each connection with the
neighbour's node id (ZAP ``User-Id``), which every frame received on it carries. A node's
DEALER to a neighbour is a CURVE client that knows the neighbour's public key, so its answers
can only come from that neighbour.

ZeroMQ allows one ZAP handler per context, and host mode (:mod:`node.host`) runs several nodes,
each a CURVE server with its own neighbours, on one context. So the handler
(:class:`PeerAuthenticator`, pyzmq's asyncio authenticator) is shared by every server of a
context, and each server gets a ZAP domain of its own (``gossip-<n>``) with its own allow-list
(:class:`PeerGate`): a key admitted by one node of the process is not admitted by another. The
handler must run before a ROUTER binds: a CURVE server without a ZAP handler would admit any
client key.

A refused handshake is final: libzmq does not reconnect a client whose key was refused (ZAP
status 400), so a DEALER that knocks before its neighbour knows its key stays dead for the
run, and every exchange it starts is skipped (a thinned clock). That race is built in: a node
binds before it registers, and learns its neighbours' keys only from the bootstrap, which its
neighbours get at the same moment and may act on first; a restarted node is reconnected to by
its neighbours as soon as it binds. So a gate that has no allow-list yet *holds* each
handshake (for at most :data:`HOLD_UNTRUSTED` seconds) until :meth:`PeerGate.set_allowed`
gives it one, and then decides. Once it has one, an unknown key is refused at once. The
node's other safety net is :meth:`node.zmq_transport.ZmqTransport.redial`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import ClassVar

import zmq
import zmq.asyncio
from zmq.auth.asyncio import AsyncioAuthenticator
from zmq.auth.base import Authenticator

from gossip.files.keys import Identity

__all__ = [
    "HOLD_UNTRUSTED",
    "CurveKeys",
    "PeerAuthenticator",
    "PeerGate",
    "curve_client",
    "curve_server",
]

_domains = itertools.count()

HOLD_UNTRUSTED = 20.0
"""Seconds a gate without an allow-list holds a handshake before refusing it: longer than a
node takes from its bind to its bootstrap, registration included."""

# A pyzmq whose ZAP handler does not await its callbacks would take the held answer (a
# coroutine) for a yes: there, a gate without an allow-list refuses at once, as it used to.
_CAN_HOLD = inspect.iscoroutinefunction(Authenticator.handle_zap_message)


@dataclass(frozen=True, slots=True)
class CurveKeys:
    """A node's own CURVE key pair (Z85 text)."""

    public: str
    secret: str

    @classmethod
    def of(cls, identity: Identity) -> CurveKeys:
        """The key pair of a loaded identity."""
        return cls(identity.public, identity.secret)


def curve_server(sock: zmq.Socket[bytes], keys: CurveKeys, domain: str = "gossip") -> None:
    """Make ``sock`` a CURVE server with ``keys``, checked in ZAP ``domain`` (before it binds)."""
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret.encode("ascii"))
    sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode("ascii"))


def curve_client(
    sock: zmq.Socket[bytes] | zmq.asyncio.Socket, keys: CurveKeys, server_key: str
) -> None:
    """Make ``sock`` a CURVE client of the server whose public key is ``server_key``."""
    sock.setsockopt(zmq.CURVE_SERVERKEY, server_key.encode("ascii"))
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.public.encode("ascii"))
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret.encode("ascii"))


class PeerGate:
    """Who may connect to one CURVE server: its ZAP domain and its allow-list.

    Made by :meth:`PeerAuthenticator.gate`; ``close()`` hands it back. ``denied`` counts the
    handshakes this gate refused, ``held`` those it made wait for its first allow-list.
    """

    def __init__(self, auth: PeerAuthenticator, domain: str, hold: float = HOLD_UNTRUSTED) -> None:
        self.domain = domain
        self.denied = 0
        self.held = 0
        self.hold = hold
        self._auth = auth
        self._users: dict[bytes, str] = {}
        self._listed = asyncio.Event()  # set by the first allow-list (or by close)

    def set_allowed(self, allowed: Mapping[str, str]) -> None:
        """Admit exactly these keys (Z85 public key -> user id) from now on.

        Connections already admitted stay open; handshakes held until now are decided.
        """
        self._users = {key.encode("ascii"): user for key, user in allowed.items()}
        self._listed.set()

    def callback(self, domain: str, key: bytes) -> bool | Awaitable[bool]:
        """ZAP credentials callback: is the Z85 ``key`` admitted by this gate?

        Before the gate's first allow-list, the answer waits for it (see the module header).
        """
        if not self._listed.is_set() and _CAN_HOLD:
            self.held += 1
            return self._decide_when_listed(key)
        return self._admit(key)

    async def _decide_when_listed(self, key: bytes) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.hold):
                await self._listed.wait()
        # pyzmq asks curve_user_id right after this returns, with no await in between (and
        # it handles one ZAP request at a time), so last_user is still this key's.
        return self._admit(key)

    def _admit(self, key: bytes) -> bool:
        user = self._users.get(key)
        if user is None:
            self.denied += 1
            return False
        self._auth.last_user = user
        return True

    def close(self) -> None:
        """Stop admitting anyone here; the last gate of a context stops its ZAP handler."""
        self._users = {}
        self._listed.set()  # a held handshake is refused now
        self._auth.release(self)


class PeerAuthenticator(AsyncioAuthenticator):
    """The ZAP handler of one zmq context, shared by every CURVE server of that context.

    Use :meth:`for_context` to get (and start) the context's handler, and :meth:`gate` to get
    a server's own domain and allow-list.
    """

    _running: ClassVar[dict[int, PeerAuthenticator]] = {}  # context address -> its handler

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]] | zmq.asyncio.Context) -> None:
        # The ZAP handler is per context: shadow the sockets' context so that an asyncio
        # socket serves it whatever kind of context the sockets use.
        super().__init__(zmq.asyncio.Context.shadow(context.underlying))
        self._key = context.underlying
        self._gates: set[PeerGate] = set()
        self.last_user = ""

    @classmethod
    def for_context(
        cls, context: zmq.Context[zmq.Socket[bytes]] | zmq.asyncio.Context
    ) -> PeerAuthenticator:
        """The running handler of ``context``, started now if it has none yet."""
        auth = cls._running.get(context.underlying)
        if auth is None:
            auth = cls(context)
            auth.start()
            cls._running[context.underlying] = auth
        return auth

    def gate(self) -> PeerGate:
        """A new ZAP domain of this handler, admitting nobody until ``set_allowed``."""
        gate = PeerGate(self, f"gossip-{next(_domains)}")
        self._gates.add(gate)
        self.configure_curve_callback(gate.domain, gate)
        return gate

    def release(self, gate: PeerGate) -> None:
        """Forget ``gate``; stop the handler once it has no gate left."""
        self._gates.discard(gate)
        self.credentials_providers.pop(gate.domain, None)
        if not self._gates:
            self.stop()
            if PeerAuthenticator._running.get(self._key) is self:
                del PeerAuthenticator._running[self._key]

    def curve_user_id(self, client_public_key: bytes) -> str:
        """The user id of the key the gate just admitted.

        pyzmq calls this right after the gate's ``callback`` admitted the key (or after the
        coroutine it returned finished), with no await in between, so ``last_user`` is that
        gate's label for it.
        """
        return self.last_user
