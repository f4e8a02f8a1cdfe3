"""A node's clock offset against each neighbour, bounded by its own exchanges' round trips.

Every node turns its wall clock into the shared time ``t = rate * (now - epoch)``, so two
clocks ``d`` seconds apart put one node's ticks ``rate * d`` units of t off the other's. The
node has what it needs to see it: each of its requests goes out at ``sent`` (its clock), the
server stamps its reply with its own clock, ``wall``, and the reply comes back at
``received``. The server answered between the send and the arrival, so the partner's offset
``theta = partner clock - our clock`` satisfies (Cristian's bound, NTP's with one stamp)

    wall - received <= theta <= wall - sent

whatever the two one-way delays (an asymmetric path only moves the truth within the bound).
:class:`ClockOffsets` keeps, per peer, the intersection of these intervals: its midpoint is
the estimate, its half-width (at most half the shortest round trip seen) the error. A clock
that steps (chrony correcting it) empties the intersection: the estimate then starts again
from the latest sample.

The rule it serves (:func:`skew_tolerance`): the shared t tolerates a skew of
``SKEW_SHARE * n / (2 * rate)`` seconds, :data:`SKEW_SHARE` mean gaps between one node's
activations (measured, ``benchmarks/bench_lan.py``; docs/PERFORMANCE.md). A node warns when
an offset is past it *for certain*: the whole interval lies outside ``[-tol, tol]``.

Times are in seconds (wall clock), never units of t. Pure: the caller passes every time.

Examples
--------
>>> offsets = ClockOffsets()
>>> offsets.add(peer=3, sent=100.000, wall=100.051, received=100.002)
>>> est = offsets.estimate(3)
>>> round(est.offset, 6), round(est.error, 6)
(0.05, 0.001)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["SKEW_SAMPLES", "SKEW_SHARE", "ClockOffsets", "OffsetEstimate", "skew_tolerance"]

SKEW_SHARE = 5.0
"""The tolerated skew, in mean gaps between one node's activations. Measured
(benchmarks/bench_lan.py, grid:4x4 and line:30, 1 ms each way): skews of about 5 gaps kept the
curve typical of the model; 10 moved it 0.4 decades up, 20 a decade, 30 out of the model's
runs."""

SKEW_SAMPLES = 5
"""Exchanges behind a neighbour's bound before its offset may be warned of: by the node, and
by the coordinator from the node's reports (one rule for both)."""


def skew_tolerance(n: int, rate: float) -> float:
    """The clock skew (seconds) the shared t tolerates at ``rate`` on ``n`` nodes:
    ``SKEW_SHARE * n / (2 * rate)``.

    Examples
    --------
    >>> round(skew_tolerance(30, 300.0), 3)  # a node activates every 50 ms on average
    0.25
    """
    return SKEW_SHARE * n / (2.0 * rate)


@dataclass(frozen=True, slots=True)
class OffsetEstimate:
    """A peer's clock offset against ours: ``low <= theta <= high`` (seconds).

    Attributes
    ----------
    low, high : float
        The bound (``partner clock - our clock``).
    samples : int
        Exchanges behind it (since the last restart of the bound).
    """

    low: float
    high: float
    samples: int

    @property
    def offset(self) -> float:
        """The estimate: the bound's midpoint."""
        return 0.5 * (self.low + self.high)

    @property
    def error(self) -> float:
        """The most the estimate can be off: the bound's half-width."""
        return 0.5 * (self.high - self.low)

    def past(self, tolerance: float) -> bool:
        """Whether ``|theta| > tolerance`` for certain (the whole bound lies outside)."""
        return self.low > tolerance or self.high < -tolerance


class ClockOffsets:
    """The offset bound of each peer's clock against ours (module docstring)."""

    def __init__(self) -> None:
        self._bounds: dict[int, tuple[float, float, int]] = {}

    def add(self, peer: int, sent: float, wall: float, received: float) -> None:
        """Take in one exchange with ``peer``: our request first sent at ``sent``, its reply
        stamped ``wall`` by the peer, received at ``received`` (seconds, each by its clock).

        A sample without a stamp (``wall`` 0: an older peer), or with ``received < sent`` (our
        own clock stepped back), says nothing and is ignored.
        """
        if wall <= 0.0 or received < sent or not math.isfinite(wall):
            return
        low, high = wall - received, wall - sent
        old = self._bounds.get(peer)
        if old is not None:
            both_low, both_high = max(old[0], low), min(old[1], high)
            if both_low <= both_high:
                self._bounds[peer] = (both_low, both_high, old[2] + 1)
                return
        # The first sample, or a clock that stepped: start again from this one.
        self._bounds[peer] = (low, high, 1)

    def estimate(self, peer: int) -> OffsetEstimate | None:
        """The bound on ``peer``'s offset, or ``None`` before a first exchange with it."""
        bound = self._bounds.get(peer)
        return None if bound is None else OffsetEstimate(*bound)

    def worst(self) -> tuple[int, OffsetEstimate] | None:
        """The peer whose offset is surely the largest (by the bound's nearest end to 0)."""
        best: tuple[int, OffsetEstimate] | None = None
        for peer in self._bounds:
            est = self.estimate(peer)
            assert est is not None
            if best is None or _sure(est) > _sure(best[1]):
                best = (peer, est)
        return best


def _sure(est: OffsetEstimate) -> float:
    """The least ``|theta|`` the bound allows."""
    return max(0.0, est.low, -est.high)
