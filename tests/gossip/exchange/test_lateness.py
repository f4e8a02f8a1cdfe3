"""The lag of a node's jumps behind their ticks (gossip.exchange.lateness), replayed step by step.

Two exchangers on line:3 are joined by hand, with a virtual clock (one unit of t per second),
so each jump's time T and each tick's time are known exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.lateness import (
    KEEP_UP_GAPS,
    LagRecord,
    curve_shift,
    keeps_up,
    mean_gap,
)
from continuized.gossip.exchange.vocabulary import Link, TimeBase
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.wire.schema import Request, decode


def _line3() -> dict[int, Exchanger]:
    topo = parse_topology("line:3")
    q = graph_quantities(topo)
    params = gossip_params("arg", q.mu_gossip, q.r_max)
    timebase = TimeBase(epoch=0.0, rate=1.0)
    nodes = {}
    for v in range(topo.n):
        links = [Link(e, peer, float(topo.probs[e])) for e, peer in topo.incident(v)]
        ledger = Ledger(np.array([float(v)]), [link.edge for link in links], eta=params.eta)
        nodes[v] = Exchanger(v, links, ledger, params.c, timebase, timeout=100.0, max_timeout=100.0)
    return nodes


def _serve(nodes: dict[int, Exchanger], peer: int, frame: bytes, src: int, now: float) -> None:
    """Deliver a request to ``peer`` and its reply back to ``src``, both at ``now``."""
    answer = nodes[peer].receive(frame, now, b"r")
    assert answer
    nodes[src].receive(answer, now, None)


def test_a_tick_that_waits_for_the_lock_keeps_its_time_and_waits_exactly_its_wait() -> None:
    nodes = _line3()
    middle = nodes[1]
    left, right = (link.edge for link in middle.links)
    first = middle.initiate(left, now=1.0, due=1.0)  # on time
    assert first is not None
    assert middle.initiate(right, now=2.0, due=1.5) is None  # engaged: it waits
    _serve(nodes, first.peer, first.frame, 1, now=3.0)
    (second,) = middle.take_outgoing()  # started when the lock was freed, at 3
    request = decode(second.frame)
    assert isinstance(request, Request)
    assert request.t == 1.5  # its tick's time: nothing was applied here after it
    _serve(nodes, second.peer, second.frame, 1, now=4.0)
    assert middle.lag() == {"p50": 0.0, "p99": 0.0}  # both jumps at their ticks
    waits = [0.0, 3.0 - 1.5]
    assert middle.wait() == pytest.approx(
        {"p50": float(np.percentile(waits, 50)), "p99": float(np.percentile(waits, 99))}
    )
    # The servers started nothing: no lag or wait of theirs.
    assert nodes[0].lag() == {"p50": 0.0, "p99": 0.0}
    assert nodes[2].wait() == {"p50": 0.0, "p99": 0.0}


def test_a_tick_behind_a_later_jump_is_moved_by_exactly_that_much() -> None:
    nodes = _line3()
    middle = nodes[1]
    left, right = (link.edge for link in middle.links)
    # The middle node serves node 0's tick due at 2.0, then starts its own tick due at 1.0:
    # it jumped after 1.0 already, so its jump goes to L = 2.0, a lag of exactly 1.0.
    served = nodes[0].initiate(left, now=2.0, due=2.0)
    assert served is not None
    _serve(nodes, 1, served.frame, 0, now=2.0)
    out = middle.initiate(right, now=2.5, due=1.0)
    assert out is not None
    request = decode(out.frame)
    assert isinstance(request, Request)
    assert request.t == 2.0
    _serve(nodes, out.peer, out.frame, 1, now=3.0)
    assert middle.lag()["p50"] == pytest.approx(1.0)
    assert middle.wait()["p50"] == pytest.approx(1.5)


def test_a_tick_without_its_time_is_not_counted() -> None:
    nodes = _line3()
    out = nodes[0].initiate(nodes[0].links[0].edge, now=5.0)  # no due: as older callers
    assert out is not None
    _serve(nodes, out.peer, out.frame, 0, now=6.0)
    assert nodes[0].lag() == {"p50": 0.0, "p99": 0.0}


def test_the_record_keeps_the_recent_lags_and_clips_rounding_below_zero() -> None:
    record = LagRecord(size=3)
    for lag in (100.0, -1e-12, 1.0, 2.0):
        record.add(lag)
    assert len(record) == 3
    assert record.percentiles()["p50"] == 1.0  # 100 was pushed out; -1e-12 counts as 0


def test_keeping_up_is_a_median_wait_within_the_mean_gap_of_a_node() -> None:
    assert mean_gap(30) == 15.0
    assert math.isinf(mean_gap(1))
    limit = KEEP_UP_GAPS * mean_gap(30)
    assert keeps_up(limit, 30) is True
    assert keeps_up(limit * 1.01, 30) is False
    assert keeps_up(None, 30) is None
    assert keeps_up(math.nan, 30) is None


def test_the_shift_is_what_a_delay_does_to_an_exponential_decay() -> None:
    # error(t) = e0 exp(-theta t): seen `lag` late, it is exp(theta lag) higher.
    theta, lag = 0.01, 37.0
    late, on_time = math.exp(-theta * (100.0 - lag)), math.exp(-theta * 100.0)
    assert curve_shift(lag, theta) == pytest.approx(math.log10(late / on_time))
