"""The requests that wait at an engaged server, each until a limit (the serving side's queue).

A server in an exchange of its own makes a new request wait until that exchange settles, and
then decides it as a new one (:mod:`gossip.exchange.exchanger`, "Theory of operation"). Each waits
at most until its limit, when it is refused: that breaks a cycle of waits around a cycle of the
graph. A request is known by ``(edge, seq)``; its sender numbers its requests within a window
of its watermark (:data:`~gossip.exchange.vocabulary.SEQ_WINDOW`), and the requests it has settled
are forgotten, so at most that many wait per edge, whatever a peer sends.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from continuized.gossip.wire.schema import Request

__all__ = ["Deferred", "Waiter"]


@dataclass(frozen=True, slots=True)
class Waiter:
    """A request that waits, the route to answer it on, and when it is refused (Unix s)."""

    request: Request
    route: bytes | None
    limit: float


class Deferred:
    """The waiting requests, in arrival order.

    Examples
    --------
    >>> waiting = Deferred()
    >>> ask = Request(src=1, edge=0, seq=1, ack=0, t=2.0, u=(0.5,))
    >>> waiting.add(ask, b"r", limit=10.0)
    >>> (0, 1) in waiting, waiting.next_limit(), [w.route for w in waiting.overdue(9.0)]
    (True, 10.0, [])
    >>> [w.request.seq for w in waiting.overdue(10.0)], len(waiting)
    ([1], 0)
    """

    def __init__(self) -> None:
        self._waiters: dict[tuple[int, int], Waiter] = {}

    def __len__(self) -> int:
        return len(self._waiters)

    def __contains__(self, key: object) -> bool:
        return key in self._waiters

    def waiters(self) -> list[Waiter]:
        """Return the waiting requests, oldest first."""
        return list(self._waiters.values())

    def add(self, request: Request, route: bytes | None, limit: float) -> None:
        """Let ``request`` wait, to be answered on ``route``, until ``limit``."""
        self._waiters[(request.edge, request.seq)] = Waiter(request, route, limit)

    def take_all(self) -> Iterator[Waiter]:
        """Remove and yield every waiting request, oldest first (each is removed before it is
        yielded, so the caller may add new ones meanwhile: those are yielded too)."""
        waiters = self._waiters
        while waiters:
            yield waiters.pop(next(iter(waiters)))

    def next_limit(self) -> float | None:
        """Return the earliest limit (Unix seconds), ``None`` if nothing waits."""
        return min((w.limit for w in self._waiters.values()), default=None)

    def overdue(self, now: float) -> list[Waiter]:
        """Remove and return the requests whose limit is ``<= now``."""
        due = [key for key, w in self._waiters.items() if w.limit <= now]
        return [self._waiters.pop(key) for key in due]

    def forget(self, edge: int, up_to: float) -> int:
        """Drop the requests on ``edge`` numbered ``<= up_to`` (``math.inf``: all of them);
        return how many."""
        gone = [key for key in self._waiters if key[0] == edge and key[1] <= up_to]
        for key in gone:
            del self._waiters[key]
        return len(gone)
