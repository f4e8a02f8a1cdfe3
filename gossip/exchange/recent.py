"""The last N samples of a running figure (round trips, lags, waits) and their percentiles.

A node reports these percentiles about once a second. That code then runs cache-cold among
30 busy processes, where ``numpy.percentile``'s dozens of Python frames (and a copy of the
whole window into a new array) cost as much as several exchanges. A fixed ring of float64
and one ``ndarray.partition`` give the same figures (numpy's ``linear`` method, to the last
bit) for a fraction of that.
"""

from __future__ import annotations

import math

import numpy as np

from continuized.gossip.errors import ConfigError

__all__ = ["RecentSamples"]


class RecentSamples:
    """The last ``size`` samples added, in a ring; percentiles as ``numpy.percentile``'s.

    Examples
    --------
    >>> recent = RecentSamples(size=4)
    >>> for sample in (0.0, 0.5, 1.0, 1.5, 2.0):
    ...     recent.add(sample)
    >>> p50, p99 = recent.p50_p99()  # 0.0 was pushed out
    >>> len(recent), p50, round(p99, 3)
    (4, 1.25, 1.985)
    """

    def __init__(self, size: int = 4096) -> None:
        if size < 1:
            raise ConfigError(f"size must be >= 1, got {size!r}")
        self._ring = np.zeros(size, dtype=np.float64)
        self._next = 0
        self._count = 0

    def add(self, sample: float) -> None:
        """Record one sample, pushing out the oldest once the ring is full."""
        ring, i = self._ring, self._next
        ring[i] = sample
        i += 1
        self._next = 0 if i == len(ring) else i
        if self._count < len(ring):
            self._count += 1

    def __len__(self) -> int:
        return self._count

    def p50_p99(self) -> tuple[float, float]:
        """Return the median and the 99th percentile of the samples ((0, 0) if none)."""
        p50, p99 = self.quantiles(0.5, 0.99)
        return p50, p99

    def quantiles(self, *fractions: float) -> tuple[float, ...]:
        """Return the samples' quantiles at ``fractions`` (each in [0, 1]: 0.05 is the 5th
        percentile), as ``numpy.percentile`` gives them; 0 for each if there is no sample."""
        n = self._count
        if n == 0:
            return (0.0,) * len(fractions)
        positions = [q * (n - 1) for q in fractions]
        lows = [math.floor(pos) for pos in positions]
        highs = [min(lo + 1, n - 1) for lo in lows]
        window = self._ring[:n].copy()  # the ring keeps its order: partition a copy
        window.partition(sorted({*lows, *highs}))
        return tuple(
            _lerp(float(window[lo]), float(window[hi]), pos - lo)
            for pos, lo, hi in zip(positions, lows, highs, strict=True)
        )


def _lerp(a: float, b: float, t: float) -> float:
    # numpy's own form (numpy.lib._function_base_impl._lerp): from the nearer end, so that the
    # result is monotonic in t and equals b at t = 1.
    diff = b - a
    return b - diff * (1.0 - t) if t >= 0.5 else a + diff * t
