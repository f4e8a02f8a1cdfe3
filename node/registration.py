"""Registration: ask the coordinator for a Bootstrap over a DEALER, re-sending until it comes.

The coordinator answers only once the expected number of nodes has registered, so the node
re-sends its Register every ``every`` seconds (a lost frame, or a coordinator started after
the node, costs one period). A re-registration under the same name gets the same Bootstrap,
which is how a restarted node gets its id back (contract C2).
"""

from __future__ import annotations

import time

import zmq
import zmq.asyncio

from gossip.errors import ProtocolError, RemoteError, TransportError
from gossip.wire import Bootstrap, Register, RegisterError, decode, encode

__all__ = ["register"]


async def register(
    coordinator: str,
    request: Register,
    *,
    every: float = 2.0,
    give_up_after: float | None = None,
    context: zmq.asyncio.Context | None = None,
) -> Bootstrap:
    """Register with the coordinator at ``coordinator`` and return its Bootstrap.

    Raises
    ------
    RemoteError
        The coordinator refused the registration (its reason is in the message).
    TransportError
        No Bootstrap within ``give_up_after`` seconds, or the socket failed.
    """
    ctx = context or zmq.asyncio.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    frame = encode(request)
    deadline = None if give_up_after is None else time.monotonic() + give_up_after
    try:
        sock.connect(coordinator)
        while True:
            await sock.send(frame)
            wait = every if deadline is None else min(every, deadline - time.monotonic())
            if wait <= 0:
                raise TransportError(
                    f"no bootstrap from the coordinator at {coordinator} within {give_up_after} s; "
                    "is it running, and expecting this many nodes?"
                )
            if await sock.poll(timeout=wait * 1000):
                reply = (await sock.recv_multipart())[-1]
                try:
                    message = decode(reply)
                except ProtocolError:
                    continue  # not from a coordinator we understand; keep asking
                if isinstance(message, Bootstrap):
                    return message
                if isinstance(message, RegisterError):
                    raise RemoteError(f"the coordinator refused registration: {message.reason}")
    except zmq.ZMQError as exc:
        raise TransportError(f"registration with {coordinator} failed: {exc}") from None
    finally:
        sock.close(0)
