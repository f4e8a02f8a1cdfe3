"""A node going on in the next membership view (:mod:`gossip.exchange.membership`): new edges, new
``P_e`` and steps, a new ``eta``, from the view's start time on, without losing an exchange
of the old view that is still in flight.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gossip.errors import LocalError, ProtocolError
from gossip.exchange.vocabulary import EdgeState, ExchangeState, Link
from gossip.model.ledger import Ledger
from gossip.model.mixing import mix_values
from gossip.wire.schema import Reply

__all__ = ["Views"]


class Views:
    """The switch from one membership view to the next, and what it keeps of the previous one:
    its ``eta`` and start, which place a late reply of that view exactly (:meth:`carried`).

    The current view's start and horizon are in the shared state (``view_start``,
    ``horizon``): the initiator and the server read them on every exchange.

    Examples
    --------
    >>> from gossip.exchange.vocabulary import TimeBase
    >>> state = ExchangeState(0, TimeBase(0.0, 1.0), Ledger([1.0], [0], eta=0.1),
    ...                       {0: EdgeState(Link(0, 1, 1.0))}, max_skew_t=60.0, exclusive=True)
    >>> gone = Views(state).switch(Ledger([1.0], [1], eta=0.2), [Link(1, 2, 1.0)], start=5.0)
    >>> list(gone), list(state.edges), state.eta, state.last
    ([0], [1], 0.2, 5.0)
    """

    def __init__(self, state: ExchangeState):
        self._state = state
        self._old_eta = state.eta
        self._old_start = -math.inf

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
        self._old_eta, self._old_start = shared.eta, shared.view_start
        shared.ledger = ledger
        shared.view_start, shared.horizon = float(start), math.inf
        shared.last = max(shared.last, float(start))
        if shared.trace is not None:  # the new ledger is re-based at start: nothing before it
            shared.trace.skip_to(shared.last)
        return gone

    def carried(self, msg: Reply) -> tuple[list[float], list[float]]:
        """Return the flow of ``msg``, a reply of the previous view (``T`` before this view's
        start), mixed to this view's start, where it is booked: exact, like any late jump.

        Raises
        ------
        ProtocolError
            The reply is older than the previous view too: not applied.
        """
        if msg.t < self._old_start:
            raise ProtocolError(
                f"reply to exchange {msg.seq} on edge {msg.edge} at t={msg.t!r} is two "
                "membership views old; not applied"
            )
        return mix_values(msg.dx, msg.dz, self._old_eta, self._state.view_start - msg.t)
