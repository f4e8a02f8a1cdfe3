"""Recovery of a restarted node's ledger from its neighbours (SPEC section 5).

The two ends of an edge hold opposite ledgers. A restarted node (same bootstrap, empty
ledger) asks each neighbour for its cumulative flow on the shared edge (``LedgerRequest``)
and sets its own to the negative (``LedgerReply``): exactly the state it had. The reply is
taken at a time after every jump the neighbour made (its ``L``), so the recovered node's own
``L`` is the latest of those times, and its next exchanges are numbered above the highest the
neighbour has seen, so that none is taken for a repeat of an old one.

A restarted node may come back on another address (a new port, a new container). Before each
LedgerRequest it sends a :class:`~gossip.wire.Moved` with its address, on the same connection,
so the neighbour has learnt it by the time it answers: the neighbour then sends its requests
there (its retries too). A Moved may be lost while its LedgerRequest is not, so the node
announces its address again until a request of each neighbour has reached it. The address is
only a route: the exchanges, their numbers and their answers are unchanged, so a move cannot
apply or lose one. Who may announce an address: the node at the other end of the named edge,
as the frame's ``src`` says; with CurveZMQ that ``src`` must be the key the connection was
authenticated with (so only the node itself can move its edges; the new connection then checks
the same key again), while without keys anyone who can reach the neighbour can redirect its
edge (insecure gives that up).
"""

from __future__ import annotations

import re

import numpy as np

from gossip.errors import ProtocolError
from gossip.jumps import Flow
from gossip.ledger import Ledger
from gossip.protocol import EdgeState
from gossip.wire import LedgerReply, Moved

__all__ = ["apply_ledger_reply", "check_moved", "ledger_reply"]

# tcp://host:port, host a name, an IPv4 or a bracketed IPv6 address (no wildcard: a neighbour
# cannot connect to one).
_ADDRESS = re.compile(r"tcp://(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]*]+):(\d{1,5})")
_WILDCARDS = ("0.0.0.0", "[::]")
_MEMORY = re.compile(r"mem://\S{1,200}")


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


def check_moved(msg: Moved) -> str:
    """Return the address a :class:`~gossip.wire.Moved` announces, once checked.

    Valid: ``tcp://HOST:PORT`` (a host other than a wildcard, a port in 1..65535), and the
    in-memory transport's ``mem://NAME`` (:mod:`node.fake_transport`).

    Raises
    ------
    ProtocolError
        The address is neither, naming it.

    Examples
    --------
    >>> check_moved(Moved(src=1, edge=0, address="tcp://10.0.0.7:7001"))
    'tcp://10.0.0.7:7001'
    """
    address = msg.address
    if _MEMORY.fullmatch(address):
        return address
    match = _ADDRESS.fullmatch(address)
    if match is None or match.group(1) in _WILDCARDS or not 0 < int(match.group(2)) < 65536:
        raise ProtocolError(
            f"field 'address' must be tcp://HOST:PORT with a host other than a wildcard and a "
            f"port in 1..65535 (or mem://NAME in memory), got {address!r}"
        )
    return address
