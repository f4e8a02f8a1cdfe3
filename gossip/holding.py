"""The holding rule (``hold`` mode): which requests a busy node defers, and when it serves them.

While an exchange this node started is in flight, a request from a *higher* id is deferred and
served later, at the time it is served; requests from lower ids are served at once. Waits then
always go from a higher id to a lower one, so they cannot form a cycle, and nothing deadlocks.
:mod:`gossip.exchange` ("Holding") says why.
"""

from __future__ import annotations

from collections import deque

from gossip.wire import Message, Request

__all__ = ["DEFERRED", "Holding"]

DEFERRED = b""
"""What :meth:`gossip.exchange.Exchanger.receive` returns for a request it holds back: the
caller keeps the request's route and answers it with what ``release`` returns."""


class Holding:
    """The deferred requests of one node, in arrival order.

    Examples
    --------
    >>> hold = Holding(node_id=1)
    >>> msg = Request(src=2, edge=0, seq=1, ack=0, t=0.0, x=(1.0,), z=(1.0,))
    >>> hold.defers(msg, in_flight=1)
    True
    >>> hold.defers(msg, in_flight=0)
    False
    """

    def __init__(self, node_id: int):
        self.node_id = node_id
        self.queue: deque[Request] = deque()
        self.deferrals = 0  # requests held back so far

    def defers(self, message: Message, in_flight: int) -> bool:
        """Return True (and queue it) if ``message`` must wait for our exchange to settle."""
        if in_flight and type(message) is Request and message.src > self.node_id:
            self.queue.append(message)
            self.deferrals += 1
            return True
        return False

    def take(self, in_flight: int, force: bool) -> list[Request]:
        """Return (and forget) the deferred requests, if they may be served now."""
        if not self.queue or (in_flight and not force):
            return []
        out = list(self.queue)
        self.queue.clear()
        return out
