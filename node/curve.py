"""CurveZMQ for the node's sockets: its key pair, and who may connect (ZAP).

Ironhouse: both ends of every connection are authenticated. A node's ROUTER is a CURVE server
whose ZAP handler (:class:`PeerAuthenticator`, pyzmq's asyncio authenticator) admits only the
public keys of its neighbours and labels each connection with the neighbour's node id (ZAP
``User-Id``), which every frame received on it carries. A node's DEALER to a neighbour is a
CURVE client that knows the neighbour's public key, so its answers can only come from that
neighbour. The authenticator must run before the ROUTER binds: a CURVE server without a ZAP
handler would admit any client key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import zmq
import zmq.asyncio
from zmq.auth.asyncio import AsyncioAuthenticator
from zmq.utils import z85

from gossip.keys import Identity

__all__ = ["CurveKeys", "PeerAuthenticator", "curve_client", "curve_server"]


@dataclass(frozen=True, slots=True)
class CurveKeys:
    """A node's own CURVE key pair (Z85 text)."""

    public: str
    secret: str

    @classmethod
    def of(cls, identity: Identity) -> CurveKeys:
        """The key pair of a loaded identity."""
        return cls(identity.public, identity.secret)


def curve_server(sock: zmq.Socket[bytes], keys: CurveKeys) -> None:
    """Make ``sock`` a CURVE server with ``keys`` (call before it binds)."""
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret.encode("ascii"))
    sock.setsockopt(zmq.ZAP_DOMAIN, b"gossip")


def curve_client(
    sock: zmq.Socket[bytes] | zmq.asyncio.Socket, keys: CurveKeys, server_key: str
) -> None:
    """Make ``sock`` a CURVE client of the server whose public key is ``server_key``."""
    sock.setsockopt(zmq.CURVE_SERVERKEY, server_key.encode("ascii"))
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.public.encode("ascii"))
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret.encode("ascii"))


class PeerAuthenticator(AsyncioAuthenticator):
    """ZAP handler admitting only known public keys, each labelled with its user id.

    ``allowed`` maps Z85 public keys to the ``User-Id`` of their connections (a node id as
    text, or a node name for the coordinator). It can be replaced at any time with
    :meth:`set_allowed`; connections already admitted stay open.
    """

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]] | zmq.asyncio.Context) -> None:
        # The ZAP handler is per context: shadow the sockets' context so that an asyncio
        # socket serves it whatever kind of context the sockets use.
        super().__init__(zmq.asyncio.Context.shadow(context.underlying))
        self._users: dict[bytes, str] = {}  # not _allowed: the base class uses that name
        self.denied = 0
        self.configure_curve_callback("gossip", self)

    def set_allowed(self, allowed: Mapping[str, str]) -> None:
        """Admit exactly these keys (Z85 public key -> user id) from now on."""
        self._users = {key.encode("ascii"): user for key, user in allowed.items()}

    def callback(self, domain: str, key: bytes) -> bool:
        """ZAP credentials callback: is the Z85 ``key`` admitted?"""
        ok = key in self._users
        if not ok:
            self.denied += 1
        return ok

    def curve_user_id(self, client_public_key: bytes) -> str:
        """The user id of an admitted binary public key."""
        return self._users.get(z85.encode(client_public_key), "")
