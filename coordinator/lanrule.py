"""The LAN rules, checked live: the rate a round trip allows, and the clock skew t tolerates.

Rate. A node takes part in about ``2 / n`` of the activations, and each of its exchanges holds
its lock for one round trip. Measured on emulated LANs (``benchmarks/bench_lan.py``), a cluster
keeps up with a rate ``lambda`` (activations per second, network-wide) while

    lambda <= RATE_K * n / RTT            (RTT in seconds: the network's round trip, ping's)

and may fall behind above it (a node is busy for one round trip per exchange; past about a
third of its time, its ticks queue). The coordinator takes the smallest of the nodes' median
round trips for RTT: theirs include lock waits, which grow with the load.

Skew. Every node turns its wall clock into the shared time ``t = rate * (now - epoch)``, so a
clock off by ``d`` seconds puts the node's ticks ``rate * d`` units of t early or late. A node
takes part in ``2 / n`` activations per unit of t: the skew is harmless while it stays within
a few mean gaps between a node's activations, ``n / (2 * rate)`` seconds each (a node late by
``d`` has its requests served at its peers' later times: its jumps move later):

    skew <= SKEW_SHARE * n / (2 * lambda)

The sums stay exact whatever the skew (an exchange moves mass, it never makes it); only the
curve's fidelity to the model suffers.

The coordinator estimates each node's offset from the reports it already gets: a report says
the node's wall time when it was taken and arrives some delay ``d >= 0`` later, so
``wall - received = offset - d``, and the largest value seen is the offset less the smallest
delay (a fraction of a millisecond on a quiet LAN). The skew is the spread of the nodes' offsets:
only their differences move one node's ticks against another's. On a busy coordinator the
reports wait for its loop, some nodes' more than others' at every period, and the estimate
reads skews that are not there: up to 18 ms on two loaded cores with synchronised clocks
(``benchmarks/bench_lan.py``). So the coordinator warns only past ``SKEW_FLOOR`` as well.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from coordinator.records import NodeView
from gossip.exchange.clockskew import SKEW_SHARE, skew_tolerance  # one rule, the nodes' too

__all__ = ["RATE_K", "SKEW_FLOOR", "SKEW_SHARE", "LanRule", "rate_ceiling", "skew_tolerance"]

RATE_K = 0.15
"""Measured (benchmarks/bench_lan.py, grid:4x4 and line:30, 5 and 10 ms each way): the
latency-bound rows' ``lambda* * RTT / n`` ran from 0.14 to 0.31 on a shared machine; every rate
at or under ``0.15 * n / RTT`` passed in every run."""

SKEW_FLOOR = 0.025
"""Seconds: the smallest skew the coordinator warns of (its estimate's noise, measured)."""

_MIN_REPORTS = 3  # reports per node before its round trip means anything
_SKEW_REPORTS = 20  # before its offset does: the largest of a few delays is still noisy


def rate_ceiling(n: int, rtt_ms: float) -> float:
    """The highest rate (activations per second, network-wide) the LAN rule allows.

    Examples
    --------
    >>> rate_ceiling(30, 2.0)  # 30 nodes, a 2 ms round trip
    2250.0
    """
    return RATE_K * n / (rtt_ms / 1e3) if rtt_ms > 0 else math.inf


class LanRule:
    """Follows the reports and says, once each, when the rate or the skew breaks the rules.

    Parameters
    ----------
    n : int
        The number of nodes.
    rate : float
        The asked rate, activations per second network-wide.
    """

    def __init__(self, n: int, rate: float):
        self.n = n
        self.rate = rate
        self.offsets: dict[int, float] = {}  # node -> the largest wall - received seen
        self._seen: dict[int, int] = {}  # node -> reports counted
        self._warned: set[str] = set()
        self.given: list[str] = []  # the warnings given so far, in order

    def observe(self, nodes: Mapping[int, NodeView]) -> list[str]:
        """Take in the latest reports; return the warnings not given yet."""
        for k, view in nodes.items():
            if view.reports > self._seen.get(k, 0) and view.received > 0:
                self._seen[k] = view.reports
                gap = view.wall - view.received
                self.offsets[k] = max(self.offsets.get(k, -math.inf), gap)
        out: list[str] = []
        rtt = self.rtt_ms(nodes)
        if rtt is not None and "rate" not in self._warned:
            ceiling = rate_ceiling(self.n, rtt)
            if self.rate > ceiling:
                self._warned.add("rate")
                out.append(
                    f"rate {self.rate:g}/s is above the LAN rule for this round trip: "
                    f"{RATE_K:g} * {self.n} nodes / {rtt:.2f} ms = {ceiling:.0f}/s; the cluster "
                    f"may fall behind (lower --rate to {ceiling:.0f} or less)"
                )
        skew = self.skew()
        tolerance = skew_tolerance(self.n, self.rate)
        past = skew is not None and skew > max(tolerance, SKEW_FLOOR)
        if skew is not None and past and "skew" not in self._warned:
            self._warned.add("skew")
            out.append(
                f"the nodes' clocks differ by {skew * 1e3:.1f} ms (estimated from their "
                f"reports), past the {tolerance * 1e3:.1f} ms the shared t tolerates at "
                f"{self.rate:g}/s on {self.n} nodes; synchronise them (chrony) or lower --rate"
            )
        self.given += out
        return out

    def rtt_ms(self, nodes: Mapping[int, NodeView]) -> float | None:
        """The smallest of the nodes' round-trip p50s (ms), once half the nodes have reported:
        a node's round trips include its peers' lock waits, which grow with the load; the
        least loaded node's is closest to the network's own (what ``ping`` says)."""
        rtts = [
            v.rtt_p50_ms
            for v in nodes.values()
            # 0: no exchange measured yet
            if v.rtt_p50_ms is not None and v.rtt_p50_ms > 0 and v.reports >= _MIN_REPORTS
        ]
        if len(rtts) < max(1, self.n // 2):
            return None
        return min(rtts)

    def skew(self) -> float | None:
        """The spread of the nodes' estimated clock offsets (seconds); ``None`` until half the
        nodes have sent a few reports."""
        ready = [off for k, off in self.offsets.items() if self._seen.get(k, 0) >= _MIN_REPORTS]
        if len(ready) < max(1, self.n // 2):
            return None
        return max(ready) - min(ready)
