"""The ZeroMQ sockets of a node, made ready: its server's ROUTER and a DEALER per peer.

Both have no linger and a high-water mark of :data:`HWM` frames each way. Secure, the ROUTER is
a CURVE server whose ZAP domain (:class:`~node.transport.curve.PeerGate`) admits only the keys
it is told to trust, and a DEALER is a CURVE client that checks its peer's key; a DEALER to a
peer of this process (``inproc``, :mod:`node.transport.colocation`) has no handshake and names
itself by its node's key instead.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import zmq
from zmq.utils import z85

from continuized.gossip.errors import ConfigError
from continuized.node.transport.colocation import inproc_routing_id
from continuized.node.transport.curve import (
    CurveKeys,
    PeerAuthenticator,
    PeerGate,
    curve_client,
    curve_server,
)

__all__ = ["HWM", "peer_socket", "server_socket"]

HWM = 10_000
"""Frames queued per socket, each way, before sends are dropped (the protocol re-sends)."""


def _ready(sock: zmq.Socket[bytes]) -> zmq.Socket[bytes]:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)
    return sock


def server_socket(
    ctx: zmq.Context[zmq.Socket[bytes]], bind: str, keys: CurveKeys | None, hold: float
) -> tuple[zmq.Socket[bytes], str, PeerGate | None]:
    """A node's ROUTER bound at ``bind`` (port 0 or ``*``: any free port): the socket, the
    endpoint it is bound to, and, secure (``keys``), the gate of its ZAP domain, which holds
    an unknown key's handshake ``hold`` seconds.

    Raises
    ------
    ConfigError
        ``bind`` cannot be bound (its message names it and the fix).
    """
    router = _ready(ctx.socket(zmq.ROUTER))
    # A colocated peer's DEALER has a routing id of its own making: a new one of the same
    # node (a move) takes the route over rather than being turned away.
    router.setsockopt(zmq.ROUTER_HANDOVER, 1)
    gate = None
    if keys is not None:
        # Before the bind: a CURVE server without its ZAP handler admits any key.
        # One ZAP handler per context; this server gets a domain (allow-list) of its own.
        gate = PeerAuthenticator.for_context(ctx).gate(hold)
        curve_server(router, keys, gate.domain)
    try:
        if bind.startswith("tcp://") and bind.rsplit(":", 1)[-1] in ("0", "*"):
            host = urlsplit(bind).hostname or "0.0.0.0"
            port = router.bind_to_random_port(f"tcp://{host}")
            endpoint = f"tcp://{host}:{port}"
        else:
            router.bind(bind)
            endpoint = router.getsockopt_string(zmq.LAST_ENDPOINT)
    except zmq.ZMQError as exc:
        router.close(0)
        if gate is not None:
            gate.close()
        raise ConfigError(
            f"cannot bind the node's server to {bind!r}: {exc}; use tcp://HOST:PORT, "
            "port 0 for any free port"
        ) from None
    return router, endpoint, gate


def peer_socket(
    ctx: zmq.Context[zmq.Socket[bytes]],
    peer: int,
    keys: CurveKeys | None,
    peer_key: str | None,
    inproc: bool,
) -> zmq.Socket[bytes]:
    """A DEALER to reach ``peer``, not yet connected: secure (``keys``), a CURVE client of
    ``peer_key``, or over ``inproc`` one named after this node's key.

    Raises
    ------
    ConfigError
        Secure, and no key for ``peer`` (the transport must trust it first).
    """
    dealer = _ready(ctx.socket(zmq.DEALER))
    if keys is not None:
        if not peer_key:
            dealer.close(0)
            raise ConfigError(f"no public key for peer {peer}: call trust() first")
        if inproc:
            dealer.setsockopt(zmq.ROUTING_ID, inproc_routing_id(z85.decode(keys.public)))
        else:
            curve_client(dealer, keys, peer_key)
    return dealer
