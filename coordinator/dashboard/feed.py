"""The live feed: sample the cluster state on a fixed tick and send each tab one batch per tick.

Theory of operation
-------------------
Reports arrive at the coordinator at up to thousands per second (225 nodes at 10 Hz). Pushing
each one to the browser would make the page redraw thousands of times a second, so nothing is
pushed per report. Instead :meth:`Feed.run` wakes every ``interval`` seconds (0.25 s by
default), and :meth:`Feed.tick` compares the state with what it has already sent:

* the new error-history points of the live run, estimated and exact (through
  :class:`RunArchive`);
* the nodes whose report count changed since the last tick (one compact row each);
* the edges' activity levels, when any level changed;
* the cluster counters and the header's figures (:func:`~.views.headline`; small, always
  sent);
* for an optimization run, its new measurement rows (``opt``: the objective gap's curve);
* for a training run, its new scored points (``train``: accuracy, loss and consensus), and a
  ``band`` event when the simulator's band for it is ready (the page then reloads the
  snapshot, which holds it);
* the publish (``walls``) and arrival (``arrivals``) times of the oldest and newest report in
  the batch, from which the page measures the update latency.

That batch is serialised to JSON once and queued for every connected tab. A tab that falls
behind (its queue is full) is told to reload instead of being fed an ever-growing backlog.
The feed also measures the achieved activation rate from successive activation counts, which
the node reports themselves cannot give.

Each batch carries ``seq``; ``/api/snapshot`` carries the ``seq`` it is consistent with, so a tab
that opens the stream and then loads the snapshot drops the batches the snapshot already holds.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.coordinator.dashboard.runs import RunArchive
from continuized.coordinator.dashboard.views import cluster_counters, headline, node_row
from continuized.coordinator.figures.state import ClusterState

__all__ = [
    "ACTIVITY_TAU",
    "OPT_ROWS",
    "Client",
    "Feed",
    "activity_levels",
    "membership_events",
    "opt_view",
    "training_view",
]

_log = logging.getLogger(__name__)

ACTIVITY_TAU = 1.0
"""Time constant (seconds) of the edges' exponentially decaying activity."""

_RATE_WINDOW = 5.0  # seconds of activation counts behind the achieved rate
_QUEUE = 16  # batches a tab may fall behind (4 s at the default tick) before it must reload

OPT_ROWS = 2000
"""Most optimization rows in a snapshot: a long run's rows are thinned evenly, never cut."""


def activity_levels(activity: NDArray[np.float64], expected: NDArray[np.float64]) -> list[int]:
    """Bin each edge's recent activity against what its clock should give: 0 (idle) to 3 (hot).

    ``activity`` is the decayed count of activations on each edge; ``expected`` its steady value
    if the edge fires at its asked rate ``rate * P_e``. The ratio ``activity / max(expected, 1)``
    is idle (0) below 0.05, low (1) below 0.5, normal (2) below 1.5 and hot (3) above. The floor
    of one activation matters at low rates, where an edge fires less than once per
    :data:`ACTIVITY_TAU`: one activation then flashes the edge as normal, then fades, instead
    of marking it hot; hot always takes at least two recent activations.

    Examples
    --------
    >>> activity_levels(np.array([0.0, 0.2, 1.0, 3.0]), np.full(4, 2.0))
    [0, 1, 2, 3]
    >>> activity_levels(np.array([1.0, 0.3, 0.0]), np.full(3, 0.1))  # a quiet network
    [2, 1, 0]
    """
    ratio = activity / np.maximum(expected, 1.0)
    return [int(v) for v in np.digitize(ratio, (0.05, 0.5, 1.5))]


@dataclass(eq=False)
class Client:
    """One connected tab: its queue of serialised events (``(event, data)`` pairs)."""

    queue: asyncio.Queue[tuple[str, str]] = field(
        default_factory=lambda: asyncio.Queue(maxsize=_QUEUE)
    )
    overflowed: bool = False

    def offer(self, event: str, data: str) -> None:
        """Queue an event; if the tab is too far behind, replace its backlog by one ``reset``."""
        if self.overflowed:
            return
        try:
            self.queue.put_nowait((event, data))
        except asyncio.QueueFull:
            self.overflowed = True
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(("reset", json.dumps({"reason": "too far behind"})))


class Feed:
    """Sample ``state`` every ``interval`` seconds and broadcast what changed.

    Parameters
    ----------
    state : ClusterState
        The coordinator's state, read only.
    archive : RunArchive
        Follows the live run's history.
    interval : float
        Seconds between ticks (and so between batches).
    on_tick : callable, optional
        Called after every tick (the server uses it to start the band computation).
    """

    def __init__(
        self,
        state: ClusterState,
        archive: RunArchive,
        interval: float = 0.25,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        self.state = state
        self.archive = archive
        self.interval = interval
        self.on_tick = on_tick
        self.clients: set[Client] = set()
        self.seq = 0
        self.batches_sent = 0
        self.rate_achieved: float | None = None
        self.opt_sent = 0  # optimization rows of the live run already in batches
        self.train_sent = 0  # training points of the live run already in batches
        self._train_band = ("off", False)  # the training band's status, and a verdict, as sent
        self._reports: dict[int, int] = {}
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        self._activity: NDArray[np.float64] | None = None
        self._counts: NDArray[np.float64] | None = None
        self._levels: list[int] = []
        self._last_tick: float | None = None
        self._membership = 0  # membership events already sent

    @property
    def edge_levels(self) -> list[int]:
        """The activity level of every edge (topology order) as of the last tick."""
        return list(self._levels)

    async def run(self) -> None:
        """Tick every ``interval`` seconds until cancelled."""
        while True:
            started = time.monotonic()
            try:
                self.tick(time.time())
            except Exception:
                # A bad report must not stop the live view; it is logged with its traceback.
                _log.exception("dashboard feed tick failed")
            await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - started)))

    def tick(self, now: float) -> dict[str, Any]:
        """Sample the state once; queue a batch for every client; return the batch."""
        state = self.state
        points, reset = self.archive.follow(state)
        exact = self.archive.follow_exact(state)
        self._measure_rate(now)
        levels_changed = self._update_edges(now)
        self.seq += 1
        if reset:
            self._reports.clear()
        opt_rows = self._new_opt_rows(reset)
        train_rows = self._new_train_rows(reset)
        changed = []
        # Publish times (the reports' own wall) and arrival times at the coordinator of the
        # oldest and newest report in the batch: the page measures its latency from both.
        walls: list[float] = []
        arrivals: list[float] = []
        for node_id, view in state.nodes.items():
            if self._reports.get(node_id) != view.reports:
                self._reports[node_id] = view.reports
                changed.append(node_row(view))
                if view.wall > 0:
                    walls.append(view.wall)
                    arrivals.append(view.received)
        live = self.archive.live
        batch: dict[str, Any] = {
            "seq": self.seq,
            "now": now,
            "run": live.run_id if live is not None else "",
            "summary": headline(state, now, self.rate_achieved),
            "counters": cluster_counters(state, now, self.rate_achieved),
            "opt": opt_rows,
            "train": train_rows,
            "points": [[_num(p[0]), _num(p[1])] for p in points],
            "exact": [[_num(p[0]), _num(p[1])] for p in exact],
            "nodes": changed,
            "walls": [min(walls), max(walls)] if walls else [None, None],
            "arrivals": [min(arrivals), max(arrivals)] if arrivals else [None, None],
        }
        if levels_changed or reset:
            batch["edges"] = self._levels
        if len(state.churn) != self._membership or reset:
            self._membership = len(state.churn)
            batch["membership"] = membership_events(state)
        if self.on_tick is not None:
            self.on_tick()
        if self.clients:
            if reset:
                self.broadcast("reset", json.dumps({"reason": "new run", "seq": self.seq}))
            else:
                self.broadcast("batch", json.dumps(batch, allow_nan=False))
                self.batches_sent += 1
        training = state.training
        if training is not None:
            # The band ready, or the verdict on the finished run: rare, and the snapshot has them.
            band = (training.band_status, training.agreement is not None)
            if band != self._train_band:
                self._train_band = band
                self.broadcast("band", json.dumps({"run_id": batch["run"], "kind": "training"}))
        return batch

    def broadcast(self, event: str, data: str) -> None:
        """Queue one event for every connected tab."""
        for client in self.clients:
            client.offer(event, data)

    def _new_opt_rows(self, reset: bool) -> list[list[float | None]]:
        """The optimization rows measured since the last tick (none on a reset: the page then
        reloads the snapshot, which holds them all)."""
        opt = self.state.optimization
        rows = [] if opt is None else opt.history
        if reset or len(rows) < self.opt_sent:
            self.opt_sent = len(rows)
            return []
        new = [p.as_list() for p in rows[self.opt_sent :]]
        self.opt_sent = len(rows)
        return new

    def _new_train_rows(self, reset: bool) -> list[list[float | None]]:
        """The training points scored since the last tick (as :meth:`_new_opt_rows`)."""
        training = self.state.training
        points = [] if training is None else training.points
        if reset or len(points) < self.train_sent:
            self.train_sent = len(points)
            return []
        new = [[_num(v) for v in p.as_list()] for p in points[self.train_sent :]]
        self.train_sent = len(points)
        return new

    def _measure_rate(self, now: float) -> None:
        activations = self.state.activations()
        samples = self._samples
        samples.append((now, activations))
        while len(samples) > 2 and now - samples[1][0] >= _RATE_WINDOW:
            samples.popleft()
        then, before = samples[0]
        if now - then >= 1.0:
            self.rate_achieved = max(0.0, (activations - before) / (now - then))
        elif self.state.phase != "running":
            self.rate_achieved = None

    def _update_edges(self, now: float) -> bool:
        topo = self.state.topology
        if topo is None:
            return False
        per_edge = self.state.edge_activations()
        counts = np.array(
            [per_edge.get((int(u), int(v)), 0) for u, v in topo.edges], dtype=np.float64
        )
        if self._counts is None or self._counts.shape != counts.shape or self._activity is None:
            self._counts = counts
            self._activity = np.zeros_like(counts)
            self._last_tick = now
            self._levels = [0] * len(counts)
            return True
        dt = max(0.0, now - (self._last_tick or now))
        self._last_tick = now
        # Counts only grow within a run; a smaller count means a node restarted its ledger.
        delta = np.maximum(counts - self._counts, 0.0)
        self._counts = counts
        self._activity = self._activity * math.exp(-dt / ACTIVITY_TAU) + delta
        expected = self.state.rate * topo.probs * ACTIVITY_TAU
        levels = activity_levels(self._activity, expected)
        if levels != self._levels:
            self._levels = levels
            return True
        return False


def membership_events(state: ClusterState) -> list[dict[str, Any]]:
    """Return the membership events (joins, leaves, dead nodes, views) as JSON-safe dicts."""
    return [
        {k: (_num(v) if isinstance(v, float) else v) for k, v in event.items()}
        for event in state.churn
    ]


def opt_view(state: ClusterState, upto: int) -> dict[str, Any] | None:
    """An optimization run's task and its rows ``[:upto]`` (``None`` for an averaging run).

    Past :data:`OPT_ROWS` rows they are thinned evenly over the whole run, the last one kept,
    so the curves span the run however long it is.
    """
    opt = state.optimization
    if opt is None:
        return None
    rows = opt.history[:upto]
    step = max(1, math.ceil(len(rows) / OPT_ROWS))
    kept = rows[::step]
    if rows and kept[-1] is not rows[-1]:
        kept.append(rows[-1])
    return {
        **opt.task.as_dict(),
        "history": [p.as_list() for p in kept],
        "final": None if opt.final is None else opt.final.as_list(),
    }


def training_view(state: ClusterState, upto: int) -> dict[str, Any] | None:
    """A training run's settings, figures, verdict, its points ``[:upto]`` (``[t, loss,
    accuracy, node_accuracy, consensus, wall]``; unknown: ``None``) and the simulator's band
    (``None`` until ready; ``band_status`` says why). ``None`` for a run that does not train.
    """
    training = state.training
    if training is None:
        return None
    view = training.summary()
    view["curve"] = [[_num(v) for v in p.as_list()] for p in training.points[:upto]]
    view["band_status"] = training.band_status
    view["band"] = None if training.band is None else training.band.as_dict()
    return view


def _num(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None
