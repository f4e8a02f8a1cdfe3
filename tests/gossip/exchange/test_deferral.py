"""gossip.exchange.deferral: the requests waiting at an engaged server, each until its limit."""

from __future__ import annotations

import math

from continuized.gossip.exchange.deferral import Deferred
from continuized.gossip.wire.schema import Request


def ask(edge: int, seq: int) -> Request:
    return Request(src=1, edge=edge, seq=seq, ack=seq - 1, t=float(seq), u=(0.5,))


def test_requests_are_refused_at_their_limits_and_served_in_arrival_order() -> None:
    waiting = Deferred()
    waiting.add(ask(0, 1), b"a", limit=5.0)
    waiting.add(ask(1, 1), b"b", limit=3.0)
    waiting.add(ask(0, 2), b"c", limit=9.0)
    assert ((0, 2) in waiting, (1, 2) in waiting, waiting.next_limit()) == (True, False, 3.0)
    assert [w.route for w in waiting.overdue(5.0)] == [b"a", b"b"]  # both limits passed
    assert (len(waiting), waiting.next_limit()) == (1, 9.0)
    waiting.add(ask(1, 2), b"d", limit=12.0)
    assert [w.route for w in waiting.take_all()] == [b"c", b"d"]
    assert (len(waiting), waiting.next_limit(), waiting.overdue(math.inf)) == (0, None, [])


def test_settled_requests_are_forgotten_per_edge() -> None:
    waiting = Deferred()
    for seq in (1, 2, 3):
        waiting.add(ask(0, seq), None, limit=1.0)
        waiting.add(ask(1, seq), None, limit=1.0)
    assert waiting.forget(0, 2) == 2  # edge 0 acked up to 2
    assert [(w.request.edge, w.request.seq) for w in waiting.waiters()] == [
        (1, 1),
        (1, 2),
        (0, 3),
        (1, 3),
    ]
    assert waiting.forget(1, math.inf) == 3  # edge 1 settled at a view switch
    assert len(waiting) == 1


def test_a_request_added_while_serving_the_others_is_served_too() -> None:
    waiting = Deferred()
    waiting.add(ask(0, 1), b"a", limit=1.0)
    served = []
    for waiter in waiting.take_all():
        served.append(waiter.route)
        if waiter.route == b"a":
            waiting.add(ask(0, 2), b"b", limit=1.0)
    assert served == [b"a", b"b"]
