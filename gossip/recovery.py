"""Recovery of a restarted node's ledger from its neighbours (SPEC section 5).

The two ends of an edge hold opposite ledgers. A restarted node (same bootstrap, empty
ledger) asks each neighbour for its cumulative flow on the shared edge (``LedgerRequest``)
and sets its own to the negative (``LedgerReply``): exactly the state it had. The reply is
taken at a time after every jump the neighbour made (its ``L``), so the recovered node's own
``L`` is the latest of those times, and its next exchanges are numbered above the highest the
neighbour has seen, so that none is taken for a repeat of an old one. The reply also says up
to which of the neighbour's own exchanges on the edge everything is settled (``settled``): the
rebuilt ledger holds their jumps, and the node's requests say so (``served``,
:mod:`gossip.crossing`), or the neighbour would take them for requests that lack those jumps.

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

from gossip.answers import Answering
from gossip.errors import ProtocolError
from gossip.jumps import Flow
from gossip.ledger import Ledger
from gossip.protocol import EdgeState, Outgoing
from gossip.wire import LedgerReply, LedgerRequest, Moved, encode

__all__ = ["Recovering", "apply_ledger_reply", "check_moved", "ledger_reply"]

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
        settled=state.ack(),
    )


def apply_ledger_reply(ledger: Ledger, state: EdgeState, msg: LedgerReply) -> None:
    """Set the ledger of ``msg``'s edge to minus the neighbour's, and renumber after it."""
    total = Flow(-np.asarray(msg.fx), -np.asarray(msg.fz))
    ledger.set_edge_total(msg.edge, total, msg.t)
    state.next_seq = max(state.next_seq, msg.seq + 1)
    # The rebuilt ledger holds the jumps of every request of theirs up to ``settled``: ours
    # say so (``served``), or they would seem to lack those jumps (gossip.crossing).
    state.max_seen = max(state.max_seen, msg.settled)
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


class Recovering(Answering):
    """The recovery half of a node's :class:`~gossip.exchange.Exchanger` (module header):
    ledger requests and replies, and the ``Moved`` announcements of a restarted node."""

    # Neighbours' new addresses (peer id -> tcp://host:port), for take_moved(); checked by the
    # caller after each receive() (an empty dict is false: one test per frame).
    moved: dict[int, str]
    # Edges whose neighbour may still send to an address we had before a restart: until a
    # request of theirs reaches us (proof that they send where we are), we announce ours.
    _unheard: set[int]

    def _start_recovery(self, recover: bool) -> None:
        self.moved = {}
        self._unheard = set(self._edges) if recover else set()

    def ledger_requests(self, address: str = "") -> list[Outgoing]:
        """Return a LedgerRequest for every edge not yet recovered (re-send them until done).

        With ``address`` (where this node is reachable now) each is preceded by a ``Moved``
        announcing it, so that a neighbour that knew an older address learns this one before
        it answers.
        """
        out = []
        for e, s in self._edges.items():
            if not s.recovered:
                if address and e in self._unheard:
                    moved = Moved(src=self.node_id, edge=e, address=address)
                    out.append(Outgoing(s.link.peer, encode(moved)))
                out.append(Outgoing(s.link.peer, encode(LedgerRequest(src=self.node_id, edge=e))))
        return out

    @property
    def announcing(self) -> bool:
        """Whether a neighbour has not yet sent a request since this node (re)started: it may
        still send to an older address (see :meth:`announcements`)."""
        return bool(self._unheard)

    def announcements(self, address: str) -> list[Outgoing]:
        """Return a ``Moved`` with ``address`` for every neighbour not heard from since the
        restart: a lost one, or one whose LedgerRequest was answered while it was lost, would
        leave that neighbour sending to the old address. Re-send them until
        :attr:`announcing` is False (or the neighbour is given up on)."""
        return [
            Outgoing(self._edges[e].link.peer, encode(Moved(self.node_id, e, address)))
            for e in sorted(self._unheard)
        ]

    def take_moved(self) -> dict[int, str]:
        """Return (and forget) the neighbours' new addresses announced since the last call
        (peer id -> ``tcp://host:port``): send to each peer there from now on."""
        out, self.moved = self.moved, {}
        return out

    def give_up_recovery(self) -> list[int]:
        """Stop waiting for the edges not yet recovered (their ledgers stay as they are).

        For a neighbour that never answers. The sums are exact only if that neighbour's
        ledger on the edge was zero. Returns the edges given up on.
        """
        edges = [e for e, s in self._edges.items() if not s.recovered]
        for e in edges:
            self._edges[e].recovered = True
        self._unrecovered = 0
        return edges

    # --- answers -------------------------------------------------------------------------------
    def _on_ledger_request(self, msg: LedgerRequest, now: float) -> bytes:
        state = self._edge_from(msg.src, msg.edge)
        t = max(self.timebase.t(now), self._last)  # after every jump of ours
        return encode(ledger_reply(self.node_id, self.ledger, state, t))

    def _on_moved(self, msg: Moved, route: bytes | None) -> None:
        state = self._edge_from(msg.src, msg.edge)
        if route is None:
            # A Moved is sent as a request (to our server), never as an answer on a
            # connection of ours, which the move is about to replace.
            raise ProtocolError("a moved message must come as a request, not as an answer")
        self.moved[state.link.peer] = check_moved(msg)

    def _on_ledger_reply(self, msg: LedgerReply, now: float) -> None:
        state = self._edge_from(msg.src, msg.edge)
        if state.recovered:
            self.counters.duplicates += 1
            return
        self._check_dim("fx", msg.fx)
        self._check_time(msg.t, now)
        apply_ledger_reply(self.ledger, state, msg)
        self._unrecovered -= 1
        self._last = max(self._last, msg.t)
        if self.trace is not None:  # the rebuilt ledger holds the neighbours' jumps up to L
            self.trace.skip_to(self._last)
