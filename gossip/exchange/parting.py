"""How a stopping node parts from its neighbours without losing half an exchange.

The one rule (stated here): **a stopping node leaves only once no neighbour can still be
waiting for its answer to an exchange it applied.** An exchange the node served is applied on
its side at once, and on the initiator's only when the reply arrives. If the reply is lost the
initiator re-sends the request, and the server's cache answers it again, but only while the
server is there: a server that exits first leaves the initiator to count the exchange failed
while the server kept its half, and the sums are off by one flow.

So, once a node is closed (it starts nothing, and answers only repeated requests,
:meth:`~gossip.exchange.exchanger.Exchanger.close`), it sends a :class:`~gossip.wire.schema.Done` on
every edge on which nothing of its own is pending (:meth:`Parting.goodbyes`), again and again until
the neighbour has heard it. A ``Done`` always means "no exchange I started on this edge is
pending"; its ``heard`` field says "and I have had your Done". A node answers a Done on the
edge's route with its own Done (``heard=1``) when nothing of its own is pending on that edge,
whether it is stopping too or still running: a running neighbour that answers may start
exchanges later, but this node Nacks them or is gone, and either way neither end applies them.

A node has parted (:attr:`Parting.parted`) when, on every edge, it has had the neighbour's Done
(no retry of the neighbour's can still come for an answer) and the neighbour has heard its own
(the neighbour need not wait for it either). Then it may exit. A dead neighbour never answers:
the node then exits at its own deadline (``linger``), and only that neighbour's exchanges can
be off, as before this rule.
"""

from __future__ import annotations

from continuized.gossip.exchange.vocabulary import ExchangeState, Outgoing
from continuized.gossip.wire.schema import Done, Frame, encode

__all__ = ["Parting"]


class Parting:
    """The parting part of a node's :class:`~gossip.exchange.exchanger.Exchanger` (module header):
    the Dones it has had and those its neighbours have heard.

    Examples
    --------
    >>> from continuized.gossip.model.ledger import Ledger
    >>> from continuized.gossip.exchange.vocabulary import EdgeState, Link, TimeBase
    >>> state = ExchangeState(0, TimeBase(0.0, 1.0), Ledger([0.0], [0], eta=0.1),
    ...                       {0: EdgeState(Link(0, 1, 1.0))}, max_skew_t=60.0, exclusive=True)
    >>> parting = Parting(state)
    >>> parting.goodbyes(), parting.parted  # open: nothing to say yet
    ([], False)
    >>> state.open = False
    >>> parting.on_done(Done(1, 0, heard=1), route=None)  # the neighbour's answer to ours
    >>> parting.parted
    True
    """

    def __init__(self, state: ExchangeState):
        self._state = state
        # Edges whose neighbour has said it has nothing pending with us, and edges whose
        # neighbour has heard that we have nothing pending with it.
        self._done_from: set[int] = set()
        self._heard_by: set[int] = set()

    def goodbyes(self) -> list[Outgoing]:
        """Return a Done for every edge whose neighbour has not heard ours yet (empty while
        this node is open): send them, and again every so often, until :attr:`parted`."""
        shared = self._state
        if shared.open:
            return []
        return [
            Outgoing(state.link.peer, encode(Done(shared.node_id, e, int(e in self._done_from))))
            for e, state in shared.edges.items()
            if e not in self._heard_by and not state.pending
        ]

    @property
    def parted(self) -> bool:
        """Whether this closed node may exit: on every edge the neighbour is done with it, and
        has heard that it is done with the neighbour."""
        edges = self._state.edges.keys()
        return not self._state.open and edges <= self._done_from and edges <= self._heard_by

    def on_done(self, msg: Done, route: bytes | None) -> Frame | None:
        """Take in a neighbour's Done; return ours in answer (``heard=1``) if it came as a
        request (``route``) and nothing of ours is pending on the edge."""
        state = self._state.edge_from(msg.src, msg.edge)
        self._done_from.add(msg.edge)
        if msg.heard:
            self._heard_by.add(msg.edge)
        if route is None or state.pending:
            return None  # an answer, or ours are not settled yet: our own Done comes later
        return encode(Done(self._state.node_id, msg.edge, 1))
