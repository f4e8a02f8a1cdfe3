"""Nodes of one process reach each other over ZeroMQ's ``inproc`` transport.

In host mode (:mod:`node.host`) most of a node's neighbours often live in its own process: on
a grid of 4,096 nodes, 128 to a process, three links in four. Over TCP, each frame between two
of them goes down through the process's one zmq I/O thread, the kernel's loopback and, secure,
CurveZMQ's encryption on both sides, and every such link shakes hands at start-up. Over
``inproc`` a frame passes from one socket's queue to the other's, with none of that: it is
still a ZeroMQ frame on the same DEALER and ROUTER, read by the same code.

The rule, stated here once: a node's server binds an ``inproc`` endpoint beside its TCP one,
and a node dials a neighbour over ``inproc`` exactly when the neighbour's registered address
is one a server of its own process bound (:meth:`Colocation.endpoint`). Anything else, a
node of another process, of another host, or a colocated node that has since closed, is
dialled at its registered address.

Security: ``inproc`` has no handshake, so no CurveZMQ and no ZAP ``User-Id``. A secure DEALER
dialled over ``inproc`` says who it is in its routing id instead (:func:`inproc_routing_id`:
its own public key), and the server admits the frame as its key's node exactly as ZAP would
have (:meth:`node.transport.curve.PeerGate.user_of`). A claim is as good as a handshake here: only
sockets of the same zmq context, that is of this process, can reach an ``inproc`` endpoint,
and the nodes of one process already share its memory and its keys.
"""

from __future__ import annotations

import itertools
import os

__all__ = ["INPROC_PREFIX", "Colocation", "inproc_routing_id"]

INPROC_PREFIX = b"k"  # a routing id made by zmq starts with a zero byte; ours never does

_endpoints = itertools.count()  # unique in the process: a closed endpoint may linger a moment


def inproc_routing_id(public_key: bytes) -> bytes:
    """The routing id of a secure DEALER dialled over ``inproc``: its node's raw public key."""
    return INPROC_PREFIX + public_key


class Colocation:
    """The servers of one process (one zmq context): registered address -> ``inproc`` endpoint.

    One per run of a host process, shared by all its nodes' transports.
    """

    def __init__(self) -> None:
        self._endpoints: dict[str, str] = {}

    def claim(self) -> str:
        """A fresh ``inproc`` endpoint for a server to bind."""
        return f"inproc://gossip-{os.getpid()}-{next(_endpoints)}"

    def add(self, address: str, endpoint: str) -> None:
        """A server registered at ``address`` is bound at ``endpoint`` in this process."""
        self._endpoints[address] = endpoint

    def remove(self, address: str, endpoint: str) -> None:
        """That server closed: dial ``address`` over the network again."""
        if self._endpoints.get(address) == endpoint:
            del self._endpoints[address]

    def endpoint(self, address: str) -> str | None:
        """The ``inproc`` endpoint of the colocated server at ``address``, if there is one."""
        return self._endpoints.get(address)

    def __len__(self) -> int:
        return len(self._endpoints)
