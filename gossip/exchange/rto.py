"""Retry timeouts adapted to the measured round trips, as TCP does (RFC 6298), and the
schedule of the pending exchanges' deadlines."""

from __future__ import annotations

import heapq
from collections.abc import Callable

from continuized.gossip.exchange.recent import RecentSamples
from continuized.gossip.exchange.vocabulary import Pending

__all__ = ["RetrySchedule", "RetryTimer"]


class RetrySchedule:
    """The retry deadlines of pending exchanges, earliest first.

    Entries are dropped lazily: ``find(edge, seq)`` says whether an exchange is still pending
    (it returns it), and an entry whose exchange settled or was re-armed since is skipped.
    """

    def __init__(self, find: Callable[[int, int], Pending | None]):
        self._heap: list[tuple[float, int, int]] = []
        self._find = find

    def __len__(self) -> int:
        """Return how many deadlines are scheduled, stale ones included (dropped lazily)."""
        return len(self._heap)

    def arm(self, pending: Pending) -> None:
        """Schedule ``pending`` at its ``deadline``."""
        heapq.heappush(self._heap, (pending.deadline, pending.edge, pending.seq))

    def next(self) -> float | None:
        """Return the earliest live deadline (Unix seconds), ``None`` if nothing is pending."""
        while self._heap:
            deadline, edge, seq = self._heap[0]
            pending = self._find(edge, seq)
            if pending is not None and pending.deadline == deadline:
                return deadline
            heapq.heappop(self._heap)  # settled or re-armed since: drop the stale entry
        return None

    def pop_due(self, now: float) -> Pending | None:
        """Remove and return a pending exchange whose deadline is ``<= now``, if any."""
        deadline = self.next()
        if deadline is None or deadline > now:
            return None
        _, edge, seq = heapq.heappop(self._heap)
        return self._find(edge, seq)

    def clear(self) -> None:
        """Forget every deadline."""
        self._heap.clear()


class RetryTimer:
    """The first timeout of a new exchange: ``srtt + 4 rttvar`` within ``[low, high]`` seconds.

    Until a round trip has been measured it is ``initial``. Only exchanges answered without a
    retry are sampled (Karn's rule: a retried exchange's round trip is ambiguous).

    Examples
    --------
    >>> timer = RetryTimer(initial=0.2, low=0.01, high=2.0)
    >>> timer.sample(0.004, retried=False)
    >>> round(timer.timeout(), 3)  # 0.004 + 4 * 0.002
    0.012
    """

    def __init__(self, initial: float, low: float, high: float):
        self.initial = float(initial)
        self.low = min(float(low), self.initial)
        self.high = float(high)
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._rtts = RecentSamples(4096)

    def timeout(self) -> float:
        """Return the first timeout of a new exchange, in seconds."""
        if self._srtt is None:
            return self.initial
        rto = self._srtt + 4.0 * self._rttvar
        return min(self.high, max(self.low, rto))

    def srtt(self) -> float | None:
        """Return the smoothed round trip in seconds, ``None`` until one is measured."""
        return self._srtt

    def sample(self, rtt: float, retried: bool) -> None:
        """Record the round trip of an answered exchange (seconds)."""
        self._rtts.add(rtt)
        if retried:
            return
        # Jacobson/Karels: gains 1/8 and 1/4.
        if self._srtt is None:
            self._srtt, self._rttvar = rtt, rtt / 2.0
        else:
            self._rttvar += 0.25 * (abs(self._srtt - rtt) - self._rttvar)
            self._srtt += 0.125 * (rtt - self._srtt)

    def measured(self) -> int:
        """Return how many round trips :meth:`percentiles_ms` is taken from (0: unknown)."""
        return len(self._rtts)

    def percentiles_ms(self) -> dict[str, float]:
        """Return the p5, p50 and p99 round trip, in milliseconds, of recent exchanges (0 if
        none). The 5th percentile is the nearest to the network's idle round trip (``ping``'s):
        the median grows with the load, as requests wait for busy peers."""
        p5, p50, p99 = self._rtts.quantiles(0.05, 0.5, 0.99)
        return {"p5": p5 * 1e3, "p50": p50 * 1e3, "p99": p99 * 1e3}
