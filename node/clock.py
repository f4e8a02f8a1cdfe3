"""The Poisson clocks of a node's edges, as one merged stream of ticks.

Edge e fires at rate ``P_e`` per unit of t, its ticks split evenly between its two ends. So
this node initiates on e at rate ``P_e / 2``, and its own ticks form one Poisson process of
rate ``sum_e P_e / 2`` in which each tick belongs to edge e with probability proportional to
``P_e``. In seconds that is ``rate * sum_e P_e / 2`` ticks per second.

Ticks are scheduled in t, not in seconds: the caller turns ``t`` into a wall time with the
cluster's time base, so every node's clock runs on the same shared time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from continuized.gossip.errors import ConfigError
from continuized.gossip.exchange.vocabulary import Link

__all__ = ["PoissonClock"]

_BATCH = 1024  # random draws made at once: numpy's per-call overhead dwarfs one draw


class PoissonClock:
    """The merged tick stream of a node's share of its edges' clocks.

    Parameters
    ----------
    links : sequence of Link
        The node's edges with their probabilities ``P_e``.
    rng : numpy.random.Generator
        The source of randomness (seeded by the caller).
    share : float
        The fraction of each edge's ticks this end initiates (``1/2``: split evenly).

    Examples
    --------
    >>> from continuized.gossip.exchange.vocabulary import Link
    >>> clock = PoissonClock([Link(0, 1, 0.5), Link(1, 2, 0.5)], np.random.default_rng(0))
    >>> clock.rate  # ticks per unit of t
    0.5
    >>> t, edge = clock.next_after(0.0)
    >>> t > 0, edge in (0, 1)
    (True, True)
    """

    def __init__(self, links: Sequence[Link], rng: np.random.Generator, share: float = 0.5):
        if not links:
            raise ConfigError("a node needs at least one edge to gossip")
        probs = np.array([link.prob for link in links], dtype=np.float64)
        if not (np.all(np.isfinite(probs)) and np.all(probs > 0)):
            raise ConfigError(f"edge probabilities must be finite and > 0, got {probs.tolist()}")
        self.edges = tuple(link.edge for link in links)
        self.rate = float(share * probs.sum())
        self._cumulative = np.cumsum(probs / probs.sum())
        self._rng = rng
        self._gaps: list[float] = []
        self._picks: list[int] = []
        self._i = 0

    def next_after(self, t: float) -> tuple[float, int]:
        """Return the time (units of t) and the edge of the first tick after ``t``."""
        if self._i >= len(self._gaps):
            # Plain lists: indexing an array builds a numpy scalar per tick.
            self._gaps = self._rng.exponential(1.0 / self.rate, size=_BATCH).tolist()
            draws = self._rng.random(size=_BATCH)
            self._picks = np.minimum(
                np.searchsorted(self._cumulative, draws, side="right"), len(self.edges) - 1
            ).tolist()
            self._i = 0
        gap, pick = self._gaps[self._i], self._picks[self._i]
        self._i += 1
        return t + gap, self.edges[pick]
