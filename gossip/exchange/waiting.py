"""The activations a node owes: ticks waiting for its lock, and refused ones backing off.

A node is in at most one exchange at a time (:mod:`gossip.exchange.exchanger`, "Theory of
operation"). A tick that comes while it is engaged, or owes older activations, waits here in arrival
order and starts when the node is free: late, never dropped (a thinned clock diverges). An
activation the peer refused (:class:`~gossip.wire.schema.Busy`) comes back at the *head* of the
queue with a random pause before its next try. The whole node pauses with it: during the
pause it serves its neighbours but starts nothing. Letting the next waiting tick start at once
instead would keep a loaded node engaged all the time, and neighbours that all refuse each
other would then livelock.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

__all__ = ["MAX_BACKOFF_DOUBLINGS", "Activation", "Waiting", "backoff_delay"]

MAX_BACKOFF_DOUBLINGS = 3
"""The pause doubles with each refusal of the same activation, at most this many times."""


@dataclass(slots=True)
class Activation:
    """One activation of an edge at this end, not yet started.

    ``ready`` is the Unix time from which it may start, ``not_before`` the smallest jump time
    (in units of t) the peer would accept, ``bounces`` how many times it was refused, ``due``
    the time (units of t) its clock rang, if known (:mod:`gossip.exchange.lateness`).
    """

    edge: int
    ready: float = -math.inf
    not_before: float = -math.inf
    bounces: int = 0
    due: float = math.nan


def backoff_delay(bounces: int, rtt: float, rng: np.random.Generator) -> float:
    """Return the pause, in seconds, before the next try of an activation refused ``bounces`` times.

    Uniform in ``[0.5, 1.5] * rtt * 2^min(bounces - 1, MAX_BACKOFF_DOUBLINGS)``: of the order
    of a round trip (the peer's exchange is then likely settled), random so that two nodes that
    refused each other do not try again in step, and longer under repeated refusals.

    Examples
    --------
    >>> d = backoff_delay(1, 0.002, np.random.default_rng(0))
    >>> 0.001 <= d <= 0.003
    True
    """
    scale = rtt * 2.0 ** min(max(bounces - 1, 0), MAX_BACKOFF_DOUBLINGS)
    return scale * (0.5 + float(rng.random()))


class Waiting:
    """The activations owed by one node, in arrival order.

    Examples
    --------
    >>> w = Waiting()
    >>> w.add(Activation(3)); w.add_first(Activation(5, ready=10.0))
    >>> w.take_ready(now=1.0), w.next_ready()
    (None, 10.0)
    >>> w.take_ready(now=10.0).edge, w.take_ready(now=10.0).edge
    (5, 3)
    """

    def __init__(self) -> None:
        self._queue: deque[Activation] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, activation: Activation) -> None:
        """Queue ``activation`` behind the others."""
        self._queue.append(activation)

    def add_first(self, activation: Activation) -> None:
        """Queue ``activation`` before the others (a refused one: it is the oldest)."""
        self._queue.appendleft(activation)

    def take_ready(self, now: float) -> Activation | None:
        """Remove and return the first activation if it may start at ``now``."""
        if self._queue and self._queue[0].ready <= now:
            return self._queue.popleft()
        return None

    def next_ready(self) -> float | None:
        """Return the Unix time at which the first activation may start (``None``: none)."""
        return self._queue[0].ready if self._queue else None

    def clear(self) -> int:
        """Forget every queued activation; return how many there were."""
        count = len(self._queue)
        self._queue.clear()
        return count
