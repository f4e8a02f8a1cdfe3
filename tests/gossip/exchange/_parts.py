"""Builders for the exchanger's parts, driven alone by their own tests (no Exchanger)."""

from __future__ import annotations

from collections.abc import Callable

from continuized.gossip.exchange.answers import Answers
from continuized.gossip.exchange.initiating import ExchangeValue, Initiator
from continuized.gossip.exchange.rto import RetryTimer
from continuized.gossip.exchange.switching import Views
from continuized.gossip.exchange.vocabulary import EdgeState, ExchangeState, Link, TimeBase
from continuized.gossip.model.ledger import Ledger

TIMEBASE = TimeBase(epoch=100.0, rate=2.0)  # t = 2 (now - 100)


def shared(
    node_id: int = 0, peers: tuple[int, ...] = (1,), value: float = 1.0, exclusive: bool = True
) -> ExchangeState:
    """The shared state of node ``node_id`` with an edge ``k`` to each ``peers[k]``."""
    links = [Link(k, peer, 1.0) for k, peer in enumerate(peers)]
    ledger = Ledger([value], [link.edge for link in links], eta=0.1)
    edges = {link.edge: EdgeState(link) for link in links}
    return ExchangeState(node_id, TIMEBASE, ledger, edges, 60.0, exclusive=exclusive)


class Freed:
    """An ``on_free`` callback that records when the lock was freed."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, now: float) -> None:
        self.times.append(now)


def initiator(
    state: ExchangeState,
    timeout: float = 1.0,
    max_in_flight: int | None = None,
    value: ExchangeValue | None = None,
    freed: Callable[[float], None] | None = None,
    timer: RetryTimer | None = None,
) -> Initiator:
    """An initiator on ``state``; its timer's first timeout is ``timeout`` until round trips
    are measured (2 s at most)."""
    return Initiator(
        state,
        timer if timer is not None else RetryTimer(timeout, 0.01, 2.0),
        max_timeout=2.0,
        max_in_flight=max_in_flight,
        exchange_value=value,
        on_free=freed if freed is not None else Freed(),
    )


def answers(
    state: ExchangeState,
    starter: Initiator,
    timer: RetryTimer | None = None,
    views: Views | None = None,
) -> Answers:
    """The answers part of ``starter``'s node (seeded pauses, 1 ms before a round trip)."""
    return Answers(
        state,
        starter,
        timer if timer is not None else RetryTimer(1.0, 0.01, 2.0),
        views if views is not None else Views(state),
        rng=0,
        backoff=0.001,
    )
