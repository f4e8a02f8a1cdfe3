"""Exact mode's side of the exchange protocol: sending, settling and applying corrections.

:class:`Correcting` is the part of :class:`gossip.exchange.Exchanger` that carries out
"Exact mode" (stated in :mod:`gossip.exchange`): after every change, process the node's window
of jumps (:class:`gossip.corrections.JumpWindow`) and send each edge's corrections as one
:class:`~gossip.wire.Correction`, one in flight per edge (:class:`~gossip.corrections.
CorrectionQueue`); apply its own side when the peer acknowledges, undo it when the peer refuses;
and apply a neighbour's corrections, exactly once, as a server applies a request.
"""

from __future__ import annotations

import heapq
import math

from gossip.corrections import CorrectionQueue, JumpWindow, own_input_flow
from gossip.errors import ProtocolError
from gossip.ledger import Ledger
from gossip.protocol import Counters, EdgeState, Outgoing, Pending, TimeBase
from gossip.wire import Correction, CorrectionAck, encode

__all__ = ["Correcting"]


class Correcting:
    """Corrections of one node (a base of :class:`gossip.exchange.Exchanger`, which owns the
    state declared here and the protocol helpers)."""

    node_id: int
    c: float
    ledger: Ledger
    timebase: TimeBase
    counters: Counters
    open: bool
    window: JumpWindow | None
    _edges: dict[int, EdgeState]
    _deadlines: list[tuple[float, int, int]]
    _corrections_in_flight: int
    _outbox: list[Outgoing]
    _queue: CorrectionQueue

    def current_timeout(self) -> float:
        """Return the first timeout of a new message, in seconds."""
        raise NotImplementedError

    def _edge_from(self, src: int, edge: int) -> EdgeState:
        raise NotImplementedError

    def _check_time(self, t: float, now: float) -> float:
        raise NotImplementedError

    def _admit(self, state: EdgeState, seq: int, ack: int) -> tuple[bool, bytes | None]:
        raise NotImplementedError

    def _correct(self, start: int, t_now: float) -> None:
        """Process the window from ``start`` (``-1``: a late flow, from 0); send corrections."""
        window = self.window
        if window is None or not self.open:
            return  # closed: the state is final, nothing more is sent
        if start < 0:
            self.counters.late += 1
            start = 0
        for edge, items in window.run(start).items():
            self._queue.add(edge, items)
            self._send_corrections(edge, t_now)

    def _send_corrections(self, edge: int, t_now: float) -> None:
        items = self._queue.take(edge)
        if items is None:
            return
        state = self._edges[edge]
        seq, ack = state.next_seq, state.ack()  # ack: before this one
        state.next_seq += 1
        message = Correction(
            src=self.node_id,
            edge=edge,
            seq=seq,
            ack=ack,
            jumps=tuple(jid for jid, _, _ in items),
            t=tuple(t for _, t, _ in items),
            d=tuple(v for _, _, d in items for v in d),
        )
        frame = encode(message)
        now = self.timebase.wall(t_now)
        timeout = self.current_timeout()
        state.pending[seq] = Pending(
            edge, seq, state.link.peer, frame, now, timeout, now + timeout, items=items
        )
        heapq.heappush(self._deadlines, (now + timeout, edge, seq))
        self._corrections_in_flight += 1
        self.counters.corrections += 1
        self.counters.corrected += len(items)
        self._outbox.append(Outgoing(state.link.peer, frame))

    def _settle_correction(
        self, state: EdgeState, pending: Pending, applied: bool, now: float
    ) -> None:
        assert pending.items is not None
        edge = state.link.edge
        self._queue.done(edge)
        t_now = self.timebase.t(now)
        if applied:  # the peer has its side: ours now, at each jump's time
            for _, t, d in pending.items:
                gx, gz = own_input_flow(d, self.c)
                self.ledger.add_values(edge, gx, gz, t, sign=-1.0)
        else:
            self.counters.failed += 1
            if self.window is not None:
                start = len(self.window)
                for jid, t, d in pending.items:
                    start = min(start, self.window.revert(edge, jid, t, d))
                self._correct(start, t_now)
        if self.open:
            self._send_corrections(edge, t_now)  # what accumulated meanwhile

    def _on_correction(self, msg: Correction, now: float) -> bytes | None:
        state = self._edge_from(msg.src, msg.edge)
        dim = self.ledger.dim
        if len(msg.d) != dim * len(msg.jumps):
            raise ProtocolError(
                f"field 'd' has {len(msg.d)} components for {len(msg.jumps)} jumps; this "
                f"cluster's dim is {dim}"
            )
        t_now = self.timebase.t(now)
        items: list[tuple[int, float, list[float], list[float], list[float]]] = []
        for i, (wire_jid, t) in enumerate(zip(msg.jumps, msg.t, strict=True)):
            self._check_time(t, now)
            jid = wire_jid ^ 1  # the owner bit is the sender's: flip it to ours
            seq, mine = jid >> 1, bool(jid & 1)
            if seq < 1 or seq >= (state.next_seq if mine else state.max_seen + 1):
                raise ProtocolError(
                    f"correction of exchange {seq} on edge {msg.edge} started by "
                    f"{'us' if mine else 'the sender'}: no such exchange"
                )
            gx, gz = own_input_flow(msg.d[i * dim : (i + 1) * dim], self.c)
            if not all(map(math.isfinite, gz)):
                raise ProtocolError(f"field 'd' of item {i} overflows once scaled by c={self.c}")
            items.append((jid, t, list(msg.d[i * dim : (i + 1) * dim]), gx, gz))
        new, answer = self._admit(state, msg.seq, msg.ack)
        if not new:
            return answer
        for _, t, _, gx, gz in items:
            self.ledger.add_values(msg.edge, gx, gz, t)
        answer = encode(CorrectionAck(src=self.node_id, edge=msg.edge, seq=msg.seq))
        state.cache[msg.seq] = answer
        if self.window is not None:
            self.window.finalize(t_now)
            start = len(self.window)
            for jid, t, _, gx, gz in items:
                at = self.window.add_flow(t, edge=msg.edge, peer=msg.src, jid=jid, dx=gx, dz=gz)
                start = min(start, at)
            self._correct(start, t_now)
        return answer
