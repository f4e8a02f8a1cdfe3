"""Recovery of a restarted node's ledger from its neighbours.

The two ends of an edge hold opposite ledgers. A restarted node (same bootstrap, empty
ledger) asks each neighbour for its cumulative flow on the shared edge (``LedgerRequest``)
and sets its own to the negative (``LedgerReply``): exactly the state it had. The reply is
taken at a time after every jump the neighbour made (its ``L``), so the recovered node's own
``L`` is the latest of those times, and its next exchanges are numbered above the highest the
neighbour has seen, so that none is taken for a repeat of an old one. The reply also says up
to which of the neighbour's own exchanges on the edge everything is settled (``settled``): the
rebuilt ledger holds their jumps, and the node's requests say so (``served``,
:mod:`gossip.exchange.crossing`), or the neighbour would take them for requests that lack those
jumps.

A restarted node may come back on another address (a new port, a new container). Before each
LedgerRequest it sends a :class:`~gossip.wire.schema.Moved` with its address, on the same
connection, so the neighbour has learnt it by the time it answers: the neighbour then sends its
requests there (its retries too). A Moved may be lost while its LedgerRequest is not, so the node
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

from continuized.gossip.errors import ProtocolError
from continuized.gossip.exchange.vocabulary import EdgeState, ExchangeState, Outgoing
from continuized.gossip.model.jumps import Flow
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.wire.schema import Frame, LedgerReply, LedgerRequest, Moved, encode

__all__ = ["Recovery", "apply_ledger_reply", "check_moved", "ledger_reply"]

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
    # say so (``served``), or they would seem to lack those jumps (gossip.exchange.crossing).
    state.max_seen = max(state.max_seen, msg.settled)
    state.recovered = True


def check_moved(msg: Moved) -> str:
    """Return the address a :class:`~gossip.wire.schema.Moved` announces, once checked.

    Valid: ``tcp://HOST:PORT`` (a host other than a wildcard, a port in 1..65535), and the
    in-memory transport's ``mem://NAME`` (:mod:`node.transport.fake`).

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


class Recovery:
    """The recovery part of a node's :class:`~gossip.exchange.exchanger.Exchanger` (module header):
    ledger requests and replies, and the ``Moved`` announcements of a restarted node.

    With ``recover``, every edge starts unrecovered (``state.unrecovered`` counts them: the
    node Nacks and starts nothing until it is 0).

    Examples
    --------
    >>> from continuized.gossip.exchange.vocabulary import Link, TimeBase
    >>> from continuized.gossip.wire.schema import decode
    >>> state = ExchangeState(0, TimeBase(0.0, 1.0), Ledger([0.0], [0], eta=0.1),
    ...                       {0: EdgeState(Link(0, 1, 1.0))}, max_skew_t=60.0, exclusive=True)
    >>> recovery = Recovery(state, recover=True)
    >>> [type(decode(out.frame)).__name__ for out in recovery.ledger_requests("tcp://h:7001")]
    ['Moved', 'LedgerRequest']
    >>> reply = LedgerReply(src=1, edge=0, seq=4, t=2.0, fx=(0.5,), fz=(0.0,), settled=4)
    >>> recovery.on_ledger_reply(reply, now=2.0)
    >>> state.unrecovered, state.last, state.edges[0].next_seq
    (0, 2.0, 5)
    """

    def __init__(self, state: ExchangeState, recover: bool):
        self._state = state
        for edge in state.edges.values():
            edge.recovered = not recover
        state.unrecovered = len(state.edges) if recover else 0
        # Neighbours' new addresses (peer id -> tcp://host:port), for take_moved(); checked by
        # the caller after each receive() (an empty dict is false: one test per frame).
        self.moved: dict[int, str] = {}
        # Edges whose neighbour may still send to an address we had before a restart: until a
        # request of theirs reaches us (proof that they send where we are), we announce ours.
        self._unheard: set[int] = set(state.edges) if recover else set()

    def ledger_requests(self, address: str = "") -> list[Outgoing]:
        """Return a LedgerRequest for every edge not yet recovered (re-send them until done).

        With ``address`` (where this node is reachable now) each is preceded by a ``Moved``
        announcing it, so that a neighbour that knew an older address learns this one before
        it answers.
        """
        node_id = self._state.node_id
        out = []
        for e, s in self._state.edges.items():
            if not s.recovered:
                if address and e in self._unheard:
                    moved = Moved(src=node_id, edge=e, address=address)
                    out.append(Outgoing(s.link.peer, encode(moved)))
                out.append(Outgoing(s.link.peer, encode(LedgerRequest(src=node_id, edge=e))))
        return out

    @property
    def announcing(self) -> bool:
        """Whether a neighbour has not yet sent a request since this node (re)started: it may
        still send to an older address (see :meth:`announcements`)."""
        return bool(self._unheard)

    def heard(self, edge: int) -> None:
        """A request came on ``edge``: its neighbour reaches us where we are, no more Moved."""
        if self._unheard:
            self._unheard.discard(edge)

    def announcements(self, address: str) -> list[Outgoing]:
        """Return a ``Moved`` with ``address`` for every neighbour not heard from since the
        restart: a lost one, or one whose LedgerRequest was answered while it was lost, would
        leave that neighbour sending to the old address. Re-send them until
        :attr:`announcing` is False (or the neighbour is given up on)."""
        edges, node_id = self._state.edges, self._state.node_id
        # An edge a membership view removed since the restart has no neighbour left to tell.
        self._unheard.intersection_update(edges)
        return [
            Outgoing(edges[e].link.peer, encode(Moved(node_id, e, address)))
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
        edges = [e for e, s in self._state.edges.items() if not s.recovered]
        for e in edges:
            self._state.edges[e].recovered = True
        self._state.unrecovered = 0
        return edges

    # --- answers -------------------------------------------------------------------------------
    def on_ledger_request(self, msg: LedgerRequest, now: float) -> Frame:
        """Return our answer to a neighbour's ``LedgerRequest``, taken after all our jumps."""
        shared = self._state
        state = shared.edge_from(msg.src, msg.edge)
        t = max(shared.timebase.t(now), shared.last)  # after every jump of ours
        return encode(ledger_reply(shared.node_id, shared.ledger, state, t))

    def on_moved(self, msg: Moved, route: bytes | None) -> None:
        """Take in a neighbour's new address (for :meth:`take_moved`), once checked."""
        state = self._state.edge_from(msg.src, msg.edge)
        if route is None:
            # A Moved is sent as a request (to our server), never as an answer on a
            # connection of ours, which the move is about to replace.
            raise ProtocolError("a moved message must come as a request, not as an answer")
        self.moved[state.link.peer] = check_moved(msg)

    def on_ledger_reply(self, msg: LedgerReply, now: float) -> None:
        """Rebuild the ledger of ``msg``'s edge from the neighbour's (a repeat is counted)."""
        shared = self._state
        state = shared.edge_from(msg.src, msg.edge)
        if state.recovered:
            shared.counters.duplicates += 1
            return
        shared.check_dim("fx", msg.fx)
        shared.check_time(msg.t, now)
        # A restarted ledger holds its rows at the run's start: a reply taken long after it
        # would overflow once moved back there. Our own clock moves them up first.
        shared.ledger.rebase(shared.timebase.t(now))
        apply_ledger_reply(shared.ledger, state, msg)
        shared.unrecovered -= 1
        shared.last = max(shared.last, msg.t)
        if shared.trace is not None:  # the rebuilt ledger holds the neighbours' jumps up to L
            shared.trace.skip_to(shared.last)
