"""A node's exact values on a common grid of times, sampled as its jumps make them final.

While a cluster runs, a node's report of its state at ``t(now)`` is not the network's state at
any one time: jumps in flight are missing from it, and mixing reports of different times
forward to a common t (:mod:`coordinator.figures.metrics`) ignores the jumps in between. That
estimate sits above the true error by more as the rate grows: on line:30 (ARG, the model's own
runs, ``benchmarks/bench_estimate_bias.py``) by a median of +0.01 decades with 100 units of t
between reports (1000/s with 0.1 s reports), +0.24 with 400 and +0.70 with 800 (p90 +4.4),
which hides what the cluster itself does.

**The rule.** Every node applies its jumps in non-decreasing order of their times, and every
jump it applies later has a time ``>= L``, its latest (:mod:`gossip.exchange.exchanger`, "Why it is
exact"). So just before a jump at T is applied, the node's ledger holds exactly the jumps before
every grid time ``g`` with ``L <= g < T``, and no jump will ever come between: ``x(g)`` read
from the ledger then is final, the value of the sequential replay at ``g``. :class:`Trace`
reads the grid times ``g = k * step`` it has not read yet and that are ``< T``, just before
each jump (:meth:`Trace.before_jump`); each is read once. With every node's trace, the
coordinator has the network's exact state at every grid time once all of them have passed it
(:mod:`coordinator.figures.exact_curve`), and the live curve can be set against the simulator's with
nothing but the jumps' timing between them.

The guarantee holds where the jumps are exact: not for a reply to a released (stuck) exchange,
nor with ``exclusive=False``; a jump placed before a time already read is then missing from
that sample. A restarted node reads only the grid times after its recovery.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from continuized.gossip.errors import ConfigError
from continuized.gossip.model.ledger import Ledger

__all__ = [
    "GRID_SECONDS",
    "MAX_CLUSTER_SAMPLES",
    "MAX_SAMPLES",
    "SAMPLES_PER_REPORT",
    "Trace",
    "trace_step",
]

MAX_SAMPLES = 100_000
"""Samples a trace keeps until taken; the oldest go first (a node whose reports stopped)."""

SAMPLES_PER_REPORT = 4
"""Grid times per report period, at the least (:func:`trace_step`)."""

GRID_SECONDS = 0.025
"""Wall seconds between two grid times when reports are further apart (:func:`trace_step`)."""

MAX_CLUSTER_SAMPLES = 8000.0
"""Samples a second from all the nodes together, at the most, that :data:`GRID_SECONDS` may
add: what the coordinator's exact curve (:mod:`coordinator.figures.exact_curve`) takes in."""


def trace_step(rate: float, metrics_period: float, nodes: int = 1) -> float:
    """Return the grid step (units of t) of a run at ``rate`` whose ``nodes`` report every
    ``metrics_period`` seconds.

    At least :data:`SAMPLES_PER_REPORT` grid times per report, and one every
    :data:`GRID_SECONDS` of wall time if that is more, unless the cluster would then send
    more than :data:`MAX_CLUSTER_SAMPLES` samples a second. Reports spaced out to spare the
    machine (:func:`coordinator.local.node_commands.default_metrics_period`) thus carry more samples
    each, and the exact curve keeps its resolution. Every node of a run must be given the
    same arguments (the bootstrap's rate, period and ``n``): the grid times are common.

    Examples
    --------
    >>> trace_step(1000.0, 0.1)
    25.0
    >>> trace_step(1000.0, 0.3, nodes=30)  # 12 samples a report: one per 25 ms still
    25.0
    >>> trace_step(1000.0, 0.512, nodes=1024)  # 4 a report: 8,000 samples a second in all
    128.0
    """
    if not all(math.isfinite(v) and v > 0 for v in (rate, metrics_period)):
        raise ConfigError(
            f"rate {rate!r} and metrics period {metrics_period!r} must be finite and > 0"
        )
    if nodes < 1:
        raise ConfigError(f"nodes must be >= 1, got {nodes!r}")
    seconds = min(
        metrics_period / SAMPLES_PER_REPORT, max(GRID_SECONDS, nodes / MAX_CLUSTER_SAMPLES)
    )
    return rate * seconds


class Trace:
    """The values of one node at the grid times ``k * step``, read as they become final.

    Parameters
    ----------
    step : float
        The grid step, in units of t.
    start : float
        The first grid time read is the first ``>= start`` (a restarted node's recovery time).

    Examples
    --------
    >>> from continuized.gossip.model.ledger import Ledger
    >>> ledger = Ledger([1.0], [0], eta=0.0)
    >>> trace = Trace(step=1.0)
    >>> trace.before_jump(ledger, 2.5)  # reads g = 0, 1, 2: no jump before them
    >>> ledger.add_values(0, [-0.5], [0.0], 2.5)
    >>> trace.before_jump(ledger, 3.2)  # reads g = 3, after the jump
    >>> trace.take()
    [[0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [3.0, 0.5]]
    """

    def __init__(self, step: float, start: float = 0.0) -> None:
        if not (math.isfinite(step) and step > 0):
            raise ConfigError(f"trace step must be finite and > 0, got {step!r}")
        if not math.isfinite(start):
            raise ConfigError(f"trace start must be finite, got {start!r}")
        self.step = float(step)
        self._k = max(0, math.ceil(start / self.step))  # the next grid index to read
        self._next = self._k * self.step
        self._samples: deque[list[float]] = deque(maxlen=MAX_SAMPLES)

    def before_jump(self, ledger: Ledger, t: float) -> None:
        """Read every grid time ``< t`` not read yet: call it just before applying a jump at t."""
        while self._next < t:
            x, _ = ledger.state_values(self._next)
            values = x.tolist() if isinstance(x, np.ndarray) else x  # a model's parameters
            self._samples.append([self._next, *values])
            self._k += 1
            self._next = self._k * self.step  # from the index: no drift from repeated sums

    def finish(self, ledger: Ledger, t: float) -> None:
        """Read every grid time ``< t``: call it once the node applies no more jumps (closed)."""
        self.before_jump(ledger, t)

    def skip_to(self, t: float) -> None:
        """Never read grid times before ``t`` (the ledger was rebuilt or re-based there)."""
        self._k = max(self._k, math.ceil(t / self.step))
        self._next = self._k * self.step

    def take(self) -> list[list[float]]:
        """Return (and forget) the samples read since the last call: ``[g, x_1, ..., x_dim]``."""
        out = list(self._samples)
        self._samples.clear()
        return out
