"""The LAN rules, checked live: the rate a round trip allows, and the clock skew t tolerates.

Rate. A node takes part in about ``2 / n`` of the activations, and each of its exchanges holds
its lock for one round trip. Measured on emulated LANs (``benchmarks/bench_lan.py``), a cluster
keeps up with a rate ``lambda`` (activations per second, network-wide) while

    lambda <= RATE_K * n / RTT            (RTT in seconds: the network's round trip, ping's)

and may fall behind above it (a node is busy for one round trip per exchange; past about a
third of its time, its ticks queue). RTT is the network's idle round trip, not the exchanges'
usual one: an exchange's round trip includes its wait for a busy peer, which grows with the
rate itself, so a rule read from the nodes' medians would lower its own ceiling as the load
rose. Each node reports the 5th percentile of its recent round trips (the exchanges that met
an idle peer), and the coordinator takes the smallest of these; a node that does not report
it counts with its median.

Skew. Every node turns its wall clock into the shared time ``t = rate * (now - epoch)``, so a
clock off by ``d`` seconds puts the node's ticks ``rate * d`` units of t early or late. A node
takes part in ``2 / n`` activations per unit of t: the skew is harmless while it stays within
a few mean gaps between a node's activations, ``n / (2 * rate)`` seconds each (a node late by
``d`` has its requests served at its peers' later times: its jumps move later):

    skew <= SKEW_SHARE * n / (2 * lambda)

The sums stay exact whatever the skew (an exchange moves mass, it never makes it); only the
curve's fidelity to the model suffers.

The evidence of skew is the nodes' own, a request-reply exchange stamped at both ends (the rule
of Cristian and NTP, :mod:`gossip.exchange.clockskew`): a neighbour stamps its reply with its
clock between the request's send and the reply's arrival, so its offset lies within half the
round trip of the midpoint. Each node keeps the intersection of these bounds for each
neighbour and reports the one surely the farthest from 0 (``clock`` in its state report). The
coordinator warns, once, when some node's bound lies wholly outside ``[-tol, tol]`` with
:data:`SKEW_SAMPLES` exchanges behind it: the node's own rule. On one machine every node reads
the same clock, every bound holds 0, and nothing is said. (A report's delay is no such
evidence: ``wall - received`` is the offset less a delay that a busy coordinator's loop
lengthens, unevenly from node to node.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from continuized.coordinator.figures.records import NodeView, PeerClock
from continuized.gossip.exchange.clockskew import (  # one rule, the nodes' too
    SKEW_SAMPLES,
    SKEW_SHARE,
    OffsetEstimate,
    skew_tolerance,
)

__all__ = ["RATE_K", "SKEW_SAMPLES", "SKEW_SHARE", "LanRule", "rate_ceiling", "skew_tolerance"]

RATE_K = 0.15
"""Measured (benchmarks/bench_lan.py, grid:4x4 and line:30, 5 and 10 ms each way): the
latency-bound rows' ``lambda* * RTT / n`` ran from 0.14 to 0.31 on a shared machine; every rate
at or under ``0.15 * n / RTT`` passed in every run."""

_MIN_REPORTS = 3  # reports per node before its round trip means anything


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
        # node -> its latest bound on a neighbour's offset, with SKEW_SAMPLES exchanges behind it
        self.clocks: dict[int, PeerClock] = {}
        self._names: dict[int, str] = {}
        self._warned: set[str] = set()
        self.given: list[str] = []  # the warnings given so far, in order

    def observe(self, nodes: Mapping[int, NodeView]) -> list[str]:
        """Take in the latest reports; return the warnings not given yet."""
        # Rebuilt each time: a node that left takes its bound with it.
        self.clocks = {
            k: v.clock
            for k, v in nodes.items()
            if v.clock is not None and v.clock.samples >= SKEW_SAMPLES
        }
        self._names = {k: v.name for k, v in nodes.items()}
        out: list[str] = []
        rtt = self.rtt_ms(nodes)
        if rtt is not None and "rate" not in self._warned:
            ceiling = rate_ceiling(self.n, rtt)
            if self.rate > ceiling:
                self._warned.add("rate")
                out.append(
                    f"rate {self.rate:g}/s is above the LAN rule for this network's round trip "
                    f"(the nodes' lowest 5th percentile): {RATE_K:g} * {self.n} nodes / "
                    f"{rtt:.2f} ms = {ceiling:.0f}/s; the cluster may fall behind (lower --rate "
                    f"to {ceiling:.0f} or less)"
                )
        past = self._past()
        if past is not None and "skew" not in self._warned:
            self._warned.add("skew")
            out.append(self._skew_warning(*past))
        self.given += out
        return out

    def rtt_ms(self, nodes: Mapping[int, NodeView]) -> float | None:
        """The network's idle round trip (ms): the smallest of the nodes' 5th percentiles of
        their round trips (a node's median if it does not report one), once half the nodes
        have reported. A round trip includes the wait for a busy peer, which grows with the
        load: the low tail is the exchanges that met an idle one."""
        rtts = []
        for v in nodes.values():
            low = v.rtt_p5_ms if v.rtt_p5_ms is not None else v.rtt_p50_ms
            if low is not None and low > 0 and v.reports >= _MIN_REPORTS:  # 0: none measured
                rtts.append(low)
        if len(rtts) < max(1, self.n // 2):
            return None
        return min(rtts)

    def skew(self) -> float | None:
        """The largest clock offset between two neighbours (seconds), as the nodes measured
        it (:meth:`worst`); ``None`` until half the nodes have reported one."""
        worst = self.worst()
        return None if worst is None else abs(worst[1].offset)

    def worst(self) -> tuple[int, PeerClock] | None:
        """The node whose bound on a neighbour's offset has the midpoint farthest from 0, and
        the bound (the node's latest reports); ``None`` until half the nodes have reported
        one with enough exchanges behind it."""
        if not self.clocks or len(self.clocks) < max(1, self.n // 2):
            return None
        return max(self.clocks.items(), key=lambda item: abs(item[1].offset))

    def _past(self) -> tuple[int, PeerClock] | None:
        """A node whose bound lies wholly outside what the shared t tolerates (the surest of
        them), or ``None``: a bound that reaches into the tolerance proves nothing."""
        tolerance = skew_tolerance(self.n, self.rate)
        past = [
            (k, c)
            for k, c in self.clocks.items()
            if _bound(c).past(tolerance)  # samples: counted in observe
        ]
        return max(past, key=lambda item: _sure(item[1]), default=None)

    def _skew_warning(self, node: int, clock: PeerClock) -> str:
        tolerance = skew_tolerance(self.n, self.rate)
        side = "ahead of" if clock.offset > 0 else "behind"
        return (
            f"the clock of {self._who(clock.peer)} is {abs(clock.offset) * 1e3:.1f} "
            f"+- {clock.error * 1e3:.1f} ms {side} that of {self._who(node)} (measured by "
            f"their exchanges' round trips), past the {tolerance * 1e3:.1f} ms the shared t "
            f"tolerates at {self.rate:g}/s on {self.n} nodes: synchronise the clocks (chrony) "
            "or lower --rate"
        )

    def _who(self, node: int) -> str:
        name = self._names.get(node, "")
        return f"node {node} ({name})" if name else f"node {node}"


def _bound(clock: PeerClock) -> OffsetEstimate:
    """The report's bound as the nodes' rule takes it."""
    return OffsetEstimate(clock.offset - clock.error, clock.offset + clock.error, clock.samples)


def _sure(clock: PeerClock) -> float:
    """The least offset (absolute, seconds) the bound allows."""
    return max(0.0, abs(clock.offset) - clock.error)
