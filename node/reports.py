"""A node's state report: what it publishes every report period, and once more at its stop.

The report is the C3 state payload (docs/design.md, "The four contracts"): the node's values
at its current t, its counters, its round trips, lags and waits, the bound on its farthest
neighbour's clock offset, and its exact samples since the last report. :class:`Reports` builds
it from a node's parts (:class:`Reported`: a :class:`~node.daemon.Node`), which it only reads.

The round-trip and lag percentiles are recomputed at most once a second (and for the final
report): they partition thousands of samples, most of a report's cost. A model's parameters
(``x``, ``z``, ``initial`` and each trace sample's) go as base64 text
(:func:`gossip.wire.checks.pack`): as a list of numbers they take 2 times the bytes, and far
more time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Protocol, cast

import numpy as np

from continuized.gossip.exchange.clockskew import SKEW_SAMPLES, skew_tolerance
from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.vocabulary import Counters, TimeBase
from continuized.gossip.wire.checks import pack
from continuized.gossip.wire.schema import Bootstrap
from continuized.node.transport.interface import Transport

__all__ = ["RTT_EVERY", "Reports"]

RTT_EVERY = 1.0
"""Seconds between two computations of the round-trip percentiles in the periodic reports."""

_COUNTER_NAMES = tuple(f.name for f in dataclasses.fields(Counters))  # asdict() is slow
_UNKNOWN: dict[str, float | None] = {"p50": None, "p99": None}  # percentiles of no sample


def _known(percentiles: dict[str, float], samples: int) -> dict[str, float | None]:
    """``percentiles`` if taken from some sample, else unknown (JSON null, never 0)."""
    return dict(percentiles) if samples else dict.fromkeys(percentiles)


class Reported(Protocol):
    """What a report reads of its node (:class:`node.daemon.Node`): read only."""

    @property
    def boot(self) -> Bootstrap: ...
    @property
    def name(self) -> str: ...
    @property
    def exchanger(self) -> Exchanger: ...
    @property
    def timebase(self) -> TimeBase: ...
    @property
    def transport(self) -> Transport: ...
    @property
    def learner(self) -> object | None: ...
    @property
    def gradient_steps(self) -> int: ...
    @property
    def primal(self) -> Callable[[Any], Any] | None: ...
    @property
    def clock(self) -> Callable[[], float]: ...


class Reports:
    """The reports of ``node``; the node's initial value is converted once (a model's, packed)."""

    def __init__(self, node: Reported, initial: str | list[float]) -> None:
        self._node = node
        self._initial = initial
        self._rtt_ms: dict[str, float | None] = dict(_UNKNOWN)
        self._lag: dict[str, float | None] = dict(_UNKNOWN)
        self._wait: dict[str, float | None] = dict(_UNKNOWN)
        self._rtt_at = -math.inf  # when _rtt_ms and _lag were computed (clock seconds)

    def report(self, final: bool = False) -> dict[str, Any]:
        """Return the node's report (the final one with ``final``)."""
        node = self._node
        now = node.clock()
        ex = node.exchanger
        t = node.timebase.t(now)
        # Plain floats: no arrays to build and convert back.
        x, z = cast("tuple[Any, Any]", ex.ledger.state_values(t))
        if isinstance(x, np.ndarray):  # a model's parameters (training)
            x, z = pack(x), pack(z)
        if final or now - self._rtt_at >= RTT_EVERY:
            rtts, lags = ex.measured()
            # Nothing measured is unknown (null), not 0: a summary must not take the report of
            # a node that has completed none of its own exchanges for a 0 ms round trip.
            self._rtt_ms = _known(ex.rtt_ms(), rtts)
            self._lag, self._wait = _known(ex.lag(), lags), _known(ex.wait(), lags)
            self._rtt_at = now
        counters = ex.counters
        extra: dict[str, Any] = {}
        primal = node.primal
        if primal is not None:  # optimization: the ledger's pair is the dual (y, z)
            extra["y"] = x
            x = primal(x)
        return {
            **extra,
            "node": node.boot.node_id,
            "name": node.name,
            "address": node.transport.address,
            "t": t,
            "wall": now,
            "x": x,
            "z": z,
            "initial": self._initial if isinstance(self._initial, str) else list(self._initial),
            "final": final,
            "counters": {name: getattr(counters, name) for name in _COUNTER_NAMES},
            "rtt_ms": dict(self._rtt_ms),
            "clock": self.clock(),
            "lag": dict(self._lag),
            "wait": dict(self._wait),
            "edges": {str(peer): n for peer, n in ex.activations().items()},
            "pending": ex.pending,
            "gradient_steps": node.gradient_steps,
            "first_exchange": ex.first_exchange_wall,
            "waiting": ex.waiting,
            "trace": self._trace(t, final),
        }

    def _trace(self, t: float, final: bool) -> list[list[Any]]:
        node = self._node
        trace = node.exchanger.trace
        if trace is None:
            return []
        if final:  # closed and settled: no jump will come, every grid time up to t is final
            trace.finish(node.exchanger.ledger, t)
        samples = trace.take()
        if node.learner is not None:  # a model's: [g, x as base64] (gossip.wire.checks)
            return [[row[0], pack(row[1:])] for row in samples]
        return samples

    def clock(self) -> dict[str, Any] | None:
        """The neighbour whose clock offset is surely the largest, as the report carries it:
        ``peer``, ``offset`` (its clock less ours) and ``error`` (the bound's half-width), in
        seconds, and ``samples``; ``None`` before a first stamped reply. The coordinator's
        evidence of skew."""
        worst = self._node.exchanger.clock_offsets().worst()
        if worst is None:
            return None
        peer, est = worst
        return {"peer": peer, "offset": est.offset, "error": est.error, "samples": est.samples}

    def skew_warning(self) -> str:
        """The warning to give when a neighbour's clock is surely past what the shared t
        tolerates (the bound of :mod:`gossip.exchange.clockskew`, from this node's own
        exchanges), naming the fix; ``""`` while it is not."""
        node = self._node
        worst = node.exchanger.clock_offsets().worst()
        if worst is None:
            return ""
        peer, est = worst
        n = max(node.boot.n, 2)
        tolerance = skew_tolerance(n, node.boot.rate)
        if est.samples < SKEW_SAMPLES or not est.past(tolerance):
            return ""
        side = "behind" if est.offset > 0 else "ahead of"
        return (
            f"{node.name} (node {node.boot.node_id}): this host's clock is "
            f"{abs(est.offset) * 1e3:.1f} ms {side} neighbour {peer}'s (+-{est.error * 1e3:.1f} "
            f"ms, from {est.samples} exchanges' round trips), past the {tolerance * 1e3:.1f} ms "
            f"the shared t tolerates at {node.boot.rate:g}/s on {n} nodes: synchronise the "
            "hosts' clocks (chrony; `chronyc tracking` shows a host's offset) or lower --rate"
        )
