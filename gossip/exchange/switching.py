"""A node going on in the next membership view (:mod:`gossip.exchange.membership`): new edges, new
``P_e`` and steps, a new ``eta``, from the view's start time on, without losing an exchange
of the old view that is still in flight.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from continuized.gossip.errors import LocalError, ProtocolError
from continuized.gossip.exchange.vocabulary import EdgeState, ExchangeState, Link
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.model.mixing import Values, mix_values
from continuized.gossip.wire.schema import Reply

__all__ = ["Views"]


class Views:
    """The switch from one membership view to the next, and what it keeps of the earlier ones:
    each one's start and ``eta``, which place a late reply of any of them exactly
    (:meth:`carried`).

    The current view's start and horizon are in the shared state (``view_start``,
    ``horizon``): the initiator and the server read them on every exchange.

    Examples
    --------
    >>> from continuized.gossip.exchange.vocabulary import TimeBase
    >>> state = ExchangeState(0, TimeBase(0.0, 1.0), Ledger([1.0], [0], eta=0.1),
    ...                       {0: EdgeState(Link(0, 1, 1.0))}, max_skew_t=60.0, exclusive=True)
    >>> gone = Views(state).switch(Ledger([1.0], [1], eta=0.2), [Link(1, 2, 1.0)], start=5.0)
    >>> list(gone), list(state.edges), state.eta, state.last
    ([0], [1], 0.2, 5.0)
    """

    def __init__(self, state: ExchangeState):
        self._state = state
        # (start, eta) of every earlier view, oldest first: a released exchange on a kept
        # edge can be answered after several switches (two deaths in one tick make two views
        # a few nanoseconds apart), and its flow must be mixed through each of them. One
        # pair per view a node went through: a handful in any run.
        self._past: list[tuple[float, float]] = []

    def switch(self, ledger: Ledger, links: Sequence[Link], start: float) -> dict[int, EdgeState]:
        """Go on with ``ledger`` and ``links`` from time ``start``; return the dropped edges.

        Kept edges keep their sequence numbers, caches and pending exchanges; a settled edge
        is forgotten. ``L`` becomes at least ``start``. The caller checks the node is free and
        accounts for the dropped edges' pending exchanges
        (:meth:`gossip.exchange.exchanger.Exchanger.switch_view`).

        Raises
        ------
        LocalError
            The links and the ledger's edges differ.
        """
        if sorted(link.edge for link in links) != sorted(ledger.edges):
            raise LocalError(
                f"links {[link.edge for link in links]} and ledger edges {list(ledger.edges)} "
                "differ"
            )
        shared = self._state
        edges: dict[int, EdgeState] = {}
        for link in links:
            state = shared.edges.get(link.edge)
            if state is not None and state.link.peer == link.peer:
                state.link = link  # new P_e and step, same numbering
                edges[link.edge] = state
            else:
                edges[link.edge] = EdgeState(link)
        gone = {edge: state for edge, state in shared.edges.items() if edge not in edges}
        shared.edges = edges
        self._past.append((shared.view_start, shared.eta))
        shared.ledger = ledger
        shared.view_start, shared.horizon = float(start), math.inf
        shared.last = max(shared.last, float(start))
        if shared.trace is not None:  # the new ledger is re-based at start: nothing before it
            shared.trace.skip_to(shared.last)
        return gone

    def carried(self, msg: Reply) -> tuple[Values, Values]:
        """Return the flow of ``msg``, a reply of an earlier view (``T`` before this view's
        start), mixed to this view's start, where it is booked: exact, like any late jump.

        The flow is mixed through every view it crosses, each with that view's ``eta`` over
        the part of its interval after ``T``: what the other end's row went through, since it
        was on this edge (kept, the same id) all along.

        Raises
        ------
        ProtocolError
            The reply is older than every view this node went through: not applied.
        """
        shared = self._state
        if not self._past or msg.t < self._past[0][0]:
            raise ProtocolError(
                f"reply to exchange {msg.seq} on edge {msg.edge} at t={msg.t!r} is older than "
                "every membership view of this node; not applied"
            )
        dx: Values = msg.dx
        dz: Values = msg.dz
        ends = [start for start, _ in self._past[1:]] + [shared.view_start]
        for (start, eta), end in zip(self._past, ends, strict=True):
            tau = end - max(start, msg.t)
            if tau > 0:
                dx, dz = mix_values(dx, dz, eta, tau)
        return dx, dz
