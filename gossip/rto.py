"""Retry timeouts adapted to the measured round trips, as TCP does (RFC 6298)."""

from __future__ import annotations

from collections import deque

import numpy as np

__all__ = ["RetryTimer"]


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
        self._rtts: deque[float] = deque(maxlen=4096)

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
        self._rtts.append(rtt)
        if retried:
            return
        # Jacobson/Karels: gains 1/8 and 1/4.
        if self._srtt is None:
            self._srtt, self._rttvar = rtt, rtt / 2.0
        else:
            self._rttvar += 0.25 * (abs(self._srtt - rtt) - self._rttvar)
            self._srtt += 0.125 * (rtt - self._srtt)

    def percentiles_ms(self) -> dict[str, float]:
        """Return the p50 and p99 round trip, in milliseconds, of recent exchanges (0 if none)."""
        if not self._rtts:
            return {"p50": 0.0, "p99": 0.0}
        p50, p99 = np.percentile(np.fromiter(self._rtts, dtype=np.float64), [50, 99])
        return {"p50": float(p50) * 1e3, "p99": float(p99) * 1e3}
