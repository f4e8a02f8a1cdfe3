"""CurveZMQ for the node's sockets: its key pair, and who may connect (ZAP).

Ironhouse: both ends of every connection are authenticated. A node's ROUTER is a CURVE server
that admits only the public keys of its neighbours and labels each connection with the
neighbour's node id (ZAP ``User-Id``), which every frame received on it carries. A node's
DEALER to a neighbour is a CURVE client that knows the neighbour's public key, so its answers
can only come from that neighbour.

ZeroMQ allows one ZAP handler per context, and host mode (:mod:`node.host`) runs several nodes,
each a CURVE server with its own neighbours, on one context. So the handler
(:class:`PeerAuthenticator`) is shared by every server of a
context, and each server gets a ZAP domain of its own (``gossip-<n>``) with its own allow-list
(:class:`PeerGate`): a key admitted by one node of the process is not admitted by another. The
handler must run before a ROUTER binds: a CURVE server without a ZAP handler would admit any
client key.

A refused handshake is final: libzmq does not reconnect a client whose key was refused (ZAP
status 400), so a DEALER that knocks before its neighbour knows its key would stay dead for the
run. That race is built in: a node binds before it registers and learns its neighbours' keys
only from the bootstrap, which its neighbours get at the same moment and may act on first; a
joiner dials its new neighbours while the view that gives them its key is still on its way. So
a gate *holds* a handshake whose key it does not know until an allow-list
(:meth:`PeerGate.set_allowed`) admits the key, and refuses it only when its hold runs out:
:data:`HOLD_UNTRUSTED` seconds before the gate's first allow-list, :data:`HOLD_LISTED` after.
The node's last safety net is :meth:`node.transport.zeromq.ZmqTransport.redial`, which
never dials again before a peer's hold has run out.

The handler is a ROUTER on ZeroMQ's ZAP endpoint rather than pyzmq's authenticator, which
answers one request at a time and awaits each: one held handshake there stalled every other
handshake of the process, and 4,096 secure nodes never finished shaking hands. A ROUTER may
answer its requests in any order, so a held request costs nothing but its entry.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, cast

import zmq
import zmq.asyncio
from zmq.utils import z85

from continuized.gossip.files.keys import Identity

__all__ = [
    "HOLD_LISTED",
    "HOLD_UNTRUSTED",
    "CurveKeys",
    "PeerAuthenticator",
    "PeerGate",
    "curve_client",
    "curve_server",
]

_domains = itertools.count()

HOLD_UNTRUSTED = 20.0
"""Seconds a gate holds a handshake whose key no allow-list has admitted yet before refusing
it: longer than a node takes from its bind to its bootstrap, registration included, and than a
view takes to reach a joiner's neighbours. Shorter than libzmq's handshake limit (30 s)."""

HOLD_LISTED = 5.0
"""Seconds a gate that has an allow-list holds an unknown key: a joiner's neighbours learn its
key from a view that is usually under way when it dials them, and a stranger's key never comes."""

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
"""Where libzmq sends the ZAP requests of every CURVE server of a context (ZeroMQ RFC 27)."""

_OK, _REFUSED = (b"200", b"OK"), (b"400", b"not a neighbour's key")
_NOBLOCK = int(zmq.NOBLOCK)


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


@dataclass(frozen=True, slots=True)
class _Held:
    """A ZAP request a gate has not answered yet."""

    deadline: float  # loop time at which it is refused
    route: bytes  # the ZAP ROUTER's id for the libzmq session that asked
    request_id: bytes
    key: bytes  # the client's public key, 32 raw bytes


class PeerGate:
    """Who may connect to one CURVE server: its ZAP domain and its allow-list.

    Made by :meth:`PeerAuthenticator.gate`; ``close()`` hands it back. ``denied`` counts the
    handshakes this gate refused, ``held`` those it made wait for an allow-list that admits
    their key (see the module header).
    """

    def __init__(self, auth: PeerAuthenticator, domain: str, hold: float = HOLD_UNTRUSTED) -> None:
        self.domain = domain
        self.denied = 0
        self.held = 0
        self.hold = hold
        self._auth = auth
        self._users: dict[bytes, bytes] = {}  # raw public key -> user id
        self._waiting: list[_Held] = []  # in order of arrival, hence of deadline
        self._timer: asyncio.TimerHandle | None = None
        self._listed = False
        self._closed = False

    def set_allowed(self, allowed: Mapping[str, str]) -> None:
        """Admit exactly these keys (Z85 public key -> user id) from now on.

        Connections already admitted stay open; held handshakes whose key is now admitted get
        in, the others wait on until their hold runs out.
        """
        self._users = {z85.decode(key): user.encode() for key, user in allowed.items()}
        self._listed = True
        waiting, self._waiting = self._waiting, []
        for req in waiting:
            user = self._users.get(req.key)
            if user is None:
                self._waiting.append(req)
            else:
                self._auth.reply(req.route, req.request_id, _OK, user)
        self._arm()
        self._auth.flush()

    def user_of(self, key: bytes) -> bytes | None:
        """The user id this gate admits ``key`` (32 raw bytes) as now, if it does.

        For the peers that reach the server without a handshake (:mod:`node.transport.colocation`).
        """
        return self._users.get(key)

    def ask(self, route: bytes, request_id: bytes, key: bytes) -> None:
        """Decide (or hold) one ZAP request for ``key``, 32 raw bytes, as the module says."""
        user = self._users.get(key)
        if user is not None:
            self._auth.reply(route, request_id, _OK, user)
            return
        hold = self.hold if not self._listed else min(self.hold, HOLD_LISTED)
        if self._closed or hold <= 0:
            self._refuse(route, request_id)
            return
        self.held += 1
        loop = asyncio.get_running_loop()
        self._waiting.append(_Held(loop.time() + hold, route, request_id, key))
        self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._waiting:
            first = min(req.deadline for req in self._waiting)
            self._timer = asyncio.get_running_loop().call_at(first, self._expire)

    def _refuse(self, route: bytes, request_id: bytes) -> None:
        self.denied += 1
        self._auth.reply(route, request_id, _REFUSED, b"")

    def _expire(self) -> None:
        self._timer = None
        now = asyncio.get_running_loop().time()
        for req in [req for req in self._waiting if req.deadline <= now]:
            self._waiting.remove(req)
            self._refuse(req.route, req.request_id)
        self._arm()
        self._auth.flush()

    def close(self) -> None:
        """Stop admitting anyone here; the last gate of a context stops its ZAP handler."""
        self._closed = True
        self._users = {}
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, []
        for req in waiting:
            self._refuse(req.route, req.request_id)
        self._auth.release(self)


class PeerAuthenticator:
    """The ZAP handler of one zmq context, shared by every CURVE server of that context.

    Use :meth:`for_context` to get (and start) the context's handler, and :meth:`gate` to get
    a server's own domain and allow-list. It runs on the event loop it was made in.
    """

    _running: ClassVar[dict[int, PeerAuthenticator]] = {}  # context address -> its handler

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]] | zmq.asyncio.Context) -> None:
        self._key = context.underlying
        # A plain socket on a shadow: the handler reads it from its loop's reader callback,
        # whatever kind of context the servers' sockets use.
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.shadow(context.underlying)
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(ZAP_ENDPOINT)
        self._gates: dict[bytes, PeerGate] = {}
        self._loop = asyncio.get_running_loop()
        self._fd = cast(int, self._sock.getsockopt(zmq.FD))
        self._loop.add_reader(self._fd, self.flush)

    @classmethod
    def for_context(
        cls, context: zmq.Context[zmq.Socket[bytes]] | zmq.asyncio.Context
    ) -> PeerAuthenticator:
        """The running handler of ``context``, started now if it has none yet."""
        auth = cls._running.get(context.underlying)
        if auth is None:
            auth = cls(context)
            cls._running[context.underlying] = auth
        return auth

    def gate(self, hold: float = HOLD_UNTRUSTED) -> PeerGate:
        """A new ZAP domain of this handler, admitting nobody until ``set_allowed``."""
        gate = PeerGate(self, f"gossip-{next(_domains)}", hold)
        self._gates[gate.domain.encode("ascii")] = gate
        return gate

    def release(self, gate: PeerGate) -> None:
        """Forget ``gate``; stop the handler once it has no gate left."""
        self._gates.pop(gate.domain.encode("ascii"), None)
        if self._gates:
            self.flush()
            return
        self._loop.remove_reader(self._fd)
        self._sock.close(0)
        if PeerAuthenticator._running.get(self._key) is self:
            del PeerAuthenticator._running[self._key]

    def reply(
        self, route: bytes, request_id: bytes, status: tuple[bytes, bytes], user: bytes
    ) -> None:
        """Answer one ZAP request (RFC 27); :meth:`flush` after a batch of them."""
        self._sock.send_multipart([route, b"", b"1.0", request_id, *status, user, b""])

    def flush(self) -> None:
        """Read and decide every ZAP request queued now.

        Also called after replies sent from outside this reader: a send can consume the edge
        of the socket's file descriptor, which would then never wake the loop for what came in.
        """
        sock = self._sock
        if sock.closed:
            return
        while True:
            try:
                frames = sock.recv_multipart(_NOBLOCK)
            except zmq.Again:
                return
            self._ask(frames)

    def _ask(self, frames: list[bytes]) -> None:
        # route, delimiter, version, request id, domain, address, identity, mechanism, key
        if len(frames) < 4:
            return  # not a ZAP request: nobody to answer
        route, request_id = frames[0], frames[3]
        gate = self._gates.get(frames[4]) if len(frames) == 9 else None
        if gate is None or frames[2] != b"1.0" or frames[7] != b"CURVE" or len(frames[8]) != 32:
            self.reply(route, request_id, _REFUSED, b"")
            return
        gate.ask(route, request_id, frames[8])
