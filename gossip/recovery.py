"""Recovery of a restarted node's ledger from its neighbours (SPEC section 5).

The two ends of an edge hold opposite ledgers. A restarted node (same bootstrap, empty
ledger) asks each neighbour for its cumulative flow on the shared edge (``LedgerRequest``)
and sets its own to the negative (``LedgerReply``): exactly the state it had. The reply is
taken at a time after every jump the neighbour made (its ``L``), so the recovered node's own
``L`` is the latest of those times, and its next exchanges are numbered above the highest the
neighbour has seen, so that none is taken for a repeat of an old one.
"""

from __future__ import annotations

import numpy as np

from gossip.jumps import Flow
from gossip.ledger import Ledger
from gossip.protocol import EdgeState
from gossip.wire import LedgerReply

__all__ = ["apply_ledger_reply", "ledger_reply"]


def ledger_reply(node_id: int, ledger: Ledger, state: EdgeState, t: float) -> LedgerReply:
    """Return this node's answer to a neighbour's ``LedgerRequest`` on ``state``'s edge.

    ``t`` must be at or after every jump of this node (``max(t(now), L)``).
    """
    total = ledger.edge_total(state.link.edge, t)
    return LedgerReply(
        src=node_id,
        edge=state.link.edge,
        seq=max(state.max_seen, state.ack_seen),
        t=t,
        fx=tuple(total.dx.tolist()),
        fz=tuple(total.dz.tolist()),
    )


def apply_ledger_reply(ledger: Ledger, state: EdgeState, msg: LedgerReply) -> None:
    """Set the ledger of ``msg``'s edge to minus the neighbour's, and renumber after it."""
    total = Flow(-np.asarray(msg.fx), -np.asarray(msg.fz))
    ledger.set_edge_total(msg.edge, total, msg.t)
    state.next_seq = max(state.next_seq, msg.seq + 1)
    state.recovered = True
