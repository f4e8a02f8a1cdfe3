"""The event model of decentralized training, and the seeded random streams of one run.

Theory of operation. Time t counts expected gradient steps: every node has its own gradient
clock, a Poisson process of rate 1; every edge ``e`` has a communication clock of rate
``P_e * n * rate_com / 2``, so that each node takes part in ``rate_com`` communications per unit
of t on average (on a regular graph each edge fires at ``rate_com / deg``). All clocks are
independent, so their superposition is one Poisson process of rate ``n + n rate_com / 2`` whose
events are a gradient step at a uniform node (probability ``n / total``) or a communication on
an edge drawn from ``P_e``.

Every random draw comes from a stream named by ``(seed, run, purpose[, node])``
(:class:`numpy.random.SeedSequence` spawn keys), so the same seed gives the same run, every
algorithm of a run sees the same events and mini-batches, and a live node can draw its own
mini-batches from :func:`node_stream` without knowing any other node's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["COMMUNICATION", "GRADIENT", "EventClock", "clock_stream", "init_stream", "node_stream"]

GRADIENT = 0
COMMUNICATION = 1

_CLOCK, _INIT, _NODE = 0, 1, 2  # the purposes of a run's streams (spawn key's second word)


def node_stream(seed: int, node: int, run: int = 0) -> np.random.Generator:
    """Return node ``node``'s mini-batch stream in run ``run``.

    It is ``default_rng(SeedSequence(seed, spawn_key=(run, 2, node)))``: a live node can build
    it from the seed, the run and its own id alone.

    Examples
    --------
    >>> a, b = node_stream(0, 3), node_stream(0, 3)
    >>> int(a.integers(100)) == int(b.integers(100))
    True
    """
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(run, _NODE, node)))


def clock_stream(seed: int, run: int = 0) -> np.random.Generator:
    """Return the stream of run ``run``'s event times and places."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(run, _CLOCK)))


def init_stream(seed: int, run: int = 0) -> np.random.Generator:
    """Return the stream of run ``run``'s initial model(s)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(run, _INIT)))


@dataclass(frozen=True, eq=False)
class EventClock:
    """The superposed clocks of ``n`` nodes and the edges ``edges`` (fired with ``probs``).

    Examples
    --------
    >>> clock = EventClock(3, np.array([[0, 1], [1, 2]]), np.array([0.5, 0.5]), rate_com=2.0)
    >>> clock.total_rate  # 3 gradient clocks + 3 * 2 / 2 communications per unit of t
    6.0
    """

    n: int
    edges: NDArray[np.int64]
    probs: NDArray[np.float64]
    rate_com: float

    @property
    def total_rate(self) -> float:
        """Events per unit of t: ``n`` gradient steps plus ``n rate_com / 2`` communications."""
        return self.n * (1.0 + self.rate_com / 2.0)

    def events(
        self, rng: np.random.Generator, t_end: float, chunk: int = 4096
    ) -> Iterator[tuple[float, int, int, int]]:
        """Yield ``(t, kind, i, j)`` in time order until ``t_end``.

        ``kind`` is :data:`GRADIENT` (node ``i``; ``j == -1``) or :data:`COMMUNICATION` (edge
        ``{i, j}``). Draws come in chunks, since a NumPy call per event would cost more than
        the event.
        """
        total = self.total_rate
        p_grad = self.n / total
        cumulative = np.cumsum(self.probs)
        cumulative[-1] = 1.0
        t = 0.0
        while True:
            times = t + np.cumsum(rng.exponential(1.0 / total, chunk))
            grads = rng.random(chunk) < p_grad
            nodes = rng.integers(self.n, size=chunk)
            picks = np.searchsorted(cumulative, rng.random(chunk), side="right")
            ends = self.edges[np.minimum(picks, len(self.edges) - 1)]
            first = np.where(grads, nodes, ends[:, 0])
            second = np.where(grads, -1, ends[:, 1])
            kinds = np.where(grads, GRADIENT, COMMUNICATION)
            for event in zip(
                times.tolist(), kinds.tolist(), first.tolist(), second.tolist(), strict=True
            ):
                if event[0] > t_end:
                    return
                yield event
            t = float(times[-1])
