"""A node going on in the next membership view (:mod:`gossip.membership`): new edges, new
``P_e`` and steps, a new ``eta``, from the view's start time on, without losing an exchange
of the old view that is still in flight.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gossip.deferral import Deferred
from gossip.errors import LocalError
from gossip.ledger import Ledger
from gossip.parting import Parting
from gossip.protocol import EdgeState, Link

__all__ = ["Viewing"]


class Viewing(Parting):
    """A node's exchanges, able to switch membership views (the base of
    :class:`gossip.exchange.Exchanger`, which sets ``c`` and the deferred requests)."""

    c: float
    _deferred: Deferred

    def switch_view(self, ledger: Ledger, links: Sequence[Link], c: float, start: float) -> int:
        """Go on in the next membership view from time ``start`` (:mod:`gossip.membership`).

        ``ledger`` is :func:`gossip.membership.carry_ledger`'s (the settled edges dropped,
        the new ``eta`` from ``start``). Kept edges keep their sequence numbers, caches and
        pending exchanges (a late reply of the old view is placed exactly); a settled edge is
        forgotten, so anything on it later is rejected and counted, never applied. From here
        on a request at ``T < start`` is refused (``L >= start``). Returns the exchanges
        dropped with the settled edges (counted as failed: harmless, their rows are gone).

        Raises
        ------
        LocalError
            The node is engaged (switch when it is free), or the links and ledger differ.
        """
        if self._engaged is not None:
            raise LocalError("switch_view needs a free node; it is engaged in an exchange")
        if sorted(link.edge for link in links) != sorted(ledger.edges):
            raise LocalError(
                f"links {[link.edge for link in links]} and ledger edges {list(ledger.edges)} "
                "differ"
            )
        dropped = 0
        edges: dict[int, EdgeState] = {}
        for link in links:
            state = self._edges.get(link.edge)
            if state is not None and state.link.peer == link.peer:
                state.link = link  # new P_e and step, same numbering
                edges[link.edge] = state
            else:
                edges[link.edge] = EdgeState(link)
        for edge, state in self._edges.items():
            if edge not in edges:
                dropped += len(state.pending)
                self._in_flight -= len(state.pending)
                self._deferred.forget(edge, math.inf)
        self._edges = edges
        self._old_eta, self._old_start = self.eta, self._view_start
        self.ledger, self.eta, self.c = ledger, ledger.eta, float(c)
        self._view_start, self.horizon = float(start), math.inf
        self._last = max(self._last, float(start))
        if self.trace is not None:  # the new ledger is re-based at start: nothing before it
            self.trace.skip_to(self._last)
        self.counters.failed += dropped
        return dropped
