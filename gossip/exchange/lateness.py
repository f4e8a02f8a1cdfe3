"""How late the live jumps are behind the ticks of the edges' clocks, and the backlog.

The model (the paper's Section 2) jumps at the very time ``t_k`` an edge's Poisson clock rings. A
live node starts the exchange of a tick later: when the machine wakes it, when its own exchange has
settled, or after a busy peer refused it. It still asks for the jump at ``T = max(t_k, L,
floor)`` (:mod:`gossip.exchange.exchanger`, "Theory of operation"), the tick's own time unless the
node already jumped later, and a server that jumped later moves it to its own ``L``. The jump is
exact at T; what departs from the model is only its time. Two figures, in units of t, over
the recent exchanges a node started:

* the **lag**, ``T - t_k``: how far the jump moved from its tick, the departure from the
  model. Most jumps keep their tick's time (a lag of 0);
* the **wait**, ``t(start) - t_k``: how long the tick waited before its (last) request went
  out. That is the backlog: a node that cannot keep up with ``--rate`` has its ticks wait
  longer and longer. Before jumps kept their ticks' times, the lag was this wait.

A wait that stays below the time between two activations of a node (:func:`mean_gap`) moves
few jumps, and by little: the live process is then the model's with some events slightly
moved, and its curve is one the simulator produces. A wait that grows past it is a backlog:
the cluster cannot keep up with ``--rate``, the jumps of a busy node pile up against its
neighbours' later ones and move with them, and accelerated gossip drifts above the
simulator's band, then diverges (the paper's Section 6 misprints the rate). Accelerated gossip is
far more sensitive to this than a mere time shift of its curve would be (``theta * lag / ln 10``
decades, :func:`curve_shift`): on line:30, a median wait of 53 t (a shift of 0.06 decades) came with
a curve 1.9 decades above the model's median. :func:`keeps_up` draws the line at one mean gap,
on a typical node's median wait, and the coordinator's summary reports which side a run was
on.
"""

from __future__ import annotations

import math

from continuized.gossip.exchange.recent import RecentSamples

__all__ = ["KEEP_UP_GAPS", "LagRecord", "curve_shift", "keeps_up", "mean_gap"]

KEEP_UP_GAPS = 1.0
"""A cluster keeps up while a typical node's median wait is at most this many mean gaps between
two activations of a node (:func:`mean_gap`).

Measured on line:30 (mean gap 15 t; ``benchmarks/bench_cluster.py``, 11 runs from 500/s to
4000/s, one process per node and 15 nodes per process, when the jump was placed at its start):
every run whose median wait was under 7 t had a curve the model produces; runs with median
waits of 53 t and more ended 0.75 to 10 decades above the simulator's median, or diverged. The
one run in between (31 t) was still fine: the line is drawn on the safe side."""


class LagRecord:
    """The lags or waits (units of t) of the last ``size`` exchanges a node started and applied.

    Examples
    --------
    >>> record = LagRecord(size=4)
    >>> for lag in (0.0, 0.5, 1.0, 1.5, 2.0):
    ...     record.add(lag)
    >>> {name: round(lag, 3) for name, lag in record.percentiles().items()}
    {'p50': 1.25, 'p99': 1.985}
    """

    def __init__(self, size: int = 4096) -> None:
        self._lags = RecentSamples(size)

    def add(self, lag: float) -> None:
        """Record one exchange's lag; a negative one (clock rounding) counts as 0."""
        self._lags.add(lag if lag > 0.0 else 0.0)

    def __len__(self) -> int:
        return len(self._lags)

    def percentiles(self) -> dict[str, float]:
        """Return the p50 and p99 lag of the recorded exchanges (0 if none)."""
        p50, p99 = self._lags.p50_p99()
        return {"p50": p50, "p99": p99}


def mean_gap(n_nodes: int) -> float:
    """Return the mean time (units of t) between two activations of an average node.

    The whole graph has one activation per unit of t (the model), and each involves two
    nodes, so an average node has ``2 / n`` activations per unit of t.

    Examples
    --------
    >>> mean_gap(30)
    15.0
    """
    return n_nodes / 2.0 if n_nodes >= 2 else math.inf


def curve_shift(lag: float, theta: float) -> float:
    """Return by how many decades jumps ``lag`` late (units of t) would shift an error curve
    that decays at rate ``theta`` per unit of t, if lateness only moved it in time.

    Examples
    --------
    >>> round(curve_shift(100.0, 0.0023), 3)  # ln 10 = 2.303
    0.1
    """
    return theta * lag / math.log(10.0)


def keeps_up(wait_p50: float | None, n_nodes: int) -> bool | None:
    """Say whether a run whose typical node had this median wait kept up (``None``: unknown).

    Examples
    --------
    >>> keeps_up(3.0, 30), keeps_up(53.0, 30), keeps_up(None, 30)
    (True, False, None)
    """
    if wait_p50 is None or not math.isfinite(wait_p50):
        return None
    return wait_p50 <= KEEP_UP_GAPS * mean_gap(n_nodes)
