"""Exact asynchronous jumps: a node's window of recent jumps and their linear corrections.

Theory of operation
-------------------
A jump on edge {v, w} at time T must use ``x_v(T-)`` and ``x_w(T-)``, the exact states just
before T, including every earlier jump at v and at w. A live exchange cannot guarantee that:
the initiator's values were taken at its own time ``t_v < T`` (and mixed to T by the server),
and flows at either end with times before T may still be in flight. The continuized process is
linear, so the error can be removed after the fact, exactly:

* :func:`gossip.jumps.edge_flow` is linear in the gap ``x_w(T-) - x_v(T-)``. If v learns that
  its own input to jump j was off by ``d`` (true ``x_v(T_j-)`` minus the ``x_v`` the jump used),
  the jump's flow must change by ``-G(d)`` into v and ``+G(d)`` into w, both at ``T_j``, with
  ``G(d) = (d / 2, c d)`` (:func:`own_input_flow`). That change is itself a flow at ``T_j``:
  it changes both ends' states after ``T_j``, hence the inputs of their later jumps, which are
  corrected the same way in turn.
* Each node corrects only its *own* part of each jump (the other end corrects its own), so no
  node ever needs its neighbour's history.
* Corrections only move forward in time: the input of a jump depends on flows at earlier times
  only. Processing a node's jumps in time order after every change, and sending every nonzero
  correction to the peer, converges to the exact continuized process for the realised jump
  times, whatever the latency: at quiescence, every node's ``(x, z)`` equals a sequential
  replay of the same jumps (tests/gossip/test_exchange_exact.py checks it).

This module is the bookkeeping of one node, with no I/O and no wire format: a time-ordered
*window* of its recent jumps, each with its time ``t``, edge, peer, the own input ``used`` it
was computed from (mixed to ``t``), the total flow ``(dx, dz)`` into this node attributed to it
(the exchange's flow plus every correction, the node's own pending ones included), and the
state ``(bx, bz)`` just before it as of the last pass. Everything older than the window is
folded into a *base* state ``(x, z)`` at ``t_base``. The state before jump k is then::

    S_k = Phi(t_k - t_{k-1}) (S_{k-1} + flow_{k-1}),   S_0 = Phi(t_0 - t_base) base,

computed forward only (mixing factors ``<= 1``, so nothing cancels, however long the window).
A pass from index i recomputes ``S_k`` for ``k >= i``, and for each jump whose input can still
be corrected returns ``d_k = S_k.x - used_k`` when it is above ``rel_tol`` times the size of
the values (rounding noise is not worth a message); the jump's ``used`` and flow are updated at
once, so the next jumps of the same pass already see the correction. Each hop of a chain of
corrections halves it (a jump moves ``x`` by half the gap), so ``rel_tol`` bounds the chains:
about ``log2(1 / rel_tol)`` hops.

Order at one node: jumps are sorted by ``(t, edge, seq, initiator)``. Equal times are a
measure-zero event; the tie-break is the same at both ends of an edge and across the network
(a sequential replay sorted by the same key is the exact process).

Horizon: a jump older than ``horizon_t`` (units of t) behind the node's clock is final: it
leaves the window and its flow joins the base. A flow that arrives for a jump before
``t_base`` (very late; or for an old jump of a restarted neighbour) is folded into the base
(:meth:`JumpWindow.add_flow` reports it as late): mass stays exact, and the node's later jumps
in the window are still corrected, but the inputs of the final jumps are not.

Jump ids: ``jid = 2 * seq + mine``, ``seq`` the exchange's number on its edge (in the
initiator's numbering), ``mine`` 1 if this node initiated it. On the wire the bit is the
sender's (:mod:`gossip.wire`, ``Correction``), so the receiver flips it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from gossip.errors import ConfigError
from gossip.mixing import mix_values

__all__ = [
    "DEFAULT_REL_TOL",
    "CorrectionQueue",
    "Jump",
    "JumpWindow",
    "jump_id",
    "own_input_flow",
]

DEFAULT_REL_TOL = 1e-12
"""Corrections smaller than this times the size of the values are not sent (rounding noise)."""

Item = tuple[int, float, list[float]]
"""One correction: ``(jid, t, d)``, the jump, its time and the change ``d`` of our own input."""


def jump_id(seq: int, mine: bool) -> int:
    """Return the id of exchange ``seq`` on an edge, from the point of view of one end.

    Examples
    --------
    >>> jump_id(7, mine=True), jump_id(7, mine=False)
    (15, 14)
    """
    return 2 * seq + int(mine)


def own_input_flow(d: Sequence[float], c: float) -> tuple[list[float], list[float]]:
    """Return ``G(d) = (d / 2, c d)``: the flow into the *other* end of a jump whose first end's
    input ``x`` grows by ``d`` (the first end receives ``-G(d)``).

    It is :func:`gossip.jumps.edge_flow` of the gap change ``-d``, seen from the other end.

    Examples
    --------
    >>> own_input_flow([0.5], c=2.0)
    ([0.25], [1.0])
    """
    return [0.5 * v for v in d], [c * v for v in d]


@dataclass(slots=True)
class Jump:
    """One jump at this node, as the window keeps it (see the module header)."""

    t: float
    edge: int
    peer: int
    jid: int
    used: list[float] | None  # our own x input, mixed to t; None: not correctable any more
    dx: list[float]  # flow into this node at t (exchange + corrections)
    dz: list[float]
    bx: list[float]  # state just before t, as of the last pass
    bz: list[float]

    key: tuple[float, int, int, int] = (0.0, 0, 0, 0)  # (t, edge, seq, initiator)


class JumpWindow:
    """The recent jumps of one node and the pass that corrects them (see the module header).

    Parameters
    ----------
    x, z : sequence of float
        The base state at ``t_base`` (the node's initial value, or its recovered state).
    t_base : float
        Time of the base state, units of t.
    eta, c : float
        Mixing rate and jump coupling (``0, 0`` for RG).
    horizon_t : float
        Jumps older than this behind the node's clock are final (units of t).
    rel_tol : float
        Corrections below ``rel_tol`` times the size of the values are not made.
    node_id : int
        This node's id (to order equal times as the rest of the network does).

    Examples
    --------
    >>> w = JumpWindow([1.0], [1.0], 0.0, eta=0.0, c=0.0, horizon_t=100.0, node_id=0)
    >>> w.add_jump(2.0, edge=0, peer=1, jid=jump_id(1, True), used=[1.0], dx=[-0.5], dz=[0.0])
    0
    >>> w.add_jump(1.0, edge=3, peer=2, jid=jump_id(1, False), used=[1.0], dx=[0.5], dz=[0.0])
    0
    >>> w.run(0)  # the jump at t=2 used x=1, but x(2-) was 1.5: correct by +0.5
    {0: [(3, 2.0, [0.5])]}
    """

    def __init__(
        self,
        x: Sequence[float],
        z: Sequence[float],
        t_base: float,
        *,
        eta: float,
        c: float,
        horizon_t: float,
        rel_tol: float = DEFAULT_REL_TOL,
        node_id: int = 0,
    ):
        if not (horizon_t > 0 and math.isfinite(horizon_t)):
            raise ConfigError(f"horizon_t must be finite and > 0, got {horizon_t!r}")
        if not rel_tol >= 0:
            raise ConfigError(f"rel_tol must be >= 0, got {rel_tol!r}")
        self.eta = float(eta)
        self.c = float(c)
        self.horizon_t = float(horizon_t)
        self.rel_tol = float(rel_tol)
        self.node_id = node_id
        self.jumps: list[Jump] = []
        self._keys: list[tuple[float, int, int, int]] = []
        self._by_id: dict[tuple[int, int], Jump] = {}
        self.reset(x, z, t_base)

    def reset(self, x: Sequence[float], z: Sequence[float], t_base: float) -> None:
        """Forget every jump; the state is ``(x, z)`` at ``t_base`` (a recovered node)."""
        self.base_x, self.base_z = [float(v) for v in x], [float(v) for v in z]
        self.t_base = float(t_base)
        self.jumps.clear()
        self._keys.clear()
        self._by_id.clear()

    def __len__(self) -> int:
        return len(self.jumps)

    def find(self, edge: int, jid: int) -> Jump | None:
        """Return the jump ``jid`` of ``edge`` if it is in the window."""
        return self._by_id.get((edge, jid))

    def current(self, t: float) -> tuple[list[float], list[float]] | None:
        """Return the state at ``t`` if ``t`` is after every jump in the window, else ``None``.

        It includes this node's own corrections still in flight, so it is the best input for a
        new jump at ``t``.
        """
        if self.jumps:
            last = self.jumps[-1]
            if t < last.t:
                return None
            x = [b + f for b, f in zip(last.bx, last.dx, strict=True)]
            z = [b + f for b, f in zip(last.bz, last.dz, strict=True)]
            return mix_values(x, z, self.eta, t - last.t)
        if t < self.t_base:
            return None
        return mix_values(self.base_x, self.base_z, self.eta, t - self.t_base)

    # --- changes -------------------------------------------------------------------------

    def finalize(self, t_now: float) -> int:
        """Make final the jumps older than ``t_now - horizon_t``; return how many left."""
        cut = t_now - self.horizon_t
        k = bisect.bisect_left(self._keys, (cut, -1, -1, -1))
        if k == 0:
            return 0
        if k < len(self.jumps):
            first = self.jumps[k]
            self.base_x, self.base_z, self.t_base = list(first.bx), list(first.bz), first.t
        else:
            last = self.jumps[-1]
            self.base_x = [b + f for b, f in zip(last.bx, last.dx, strict=True)]
            self.base_z = [b + f for b, f in zip(last.bz, last.dz, strict=True)]
            self.t_base = last.t
        for jump in self.jumps[:k]:
            del self._by_id[(jump.edge, jump.jid)]
        del self.jumps[:k]
        del self._keys[:k]
        return k

    def add_jump(
        self,
        t: float,
        *,
        edge: int,
        peer: int,
        jid: int,
        used: list[float] | None,
        dx: Sequence[float],
        dz: Sequence[float],
    ) -> int:
        """Record a new jump (or add to one already known) and return where a pass must start.

        Returns ``-1`` if ``t`` is before the base: the flow was folded into the base, the
        jump is not kept, and a pass must start at 0 (see the horizon in the module header).
        """
        known = self._by_id.get((edge, jid))
        if known is not None:  # a correction came first: it made an input-less record
            known.used = used
            _add_into(known.dx, dx)
            _add_into(known.dz, dz)
            return self._index(known)
        if t < self.t_base:
            self._fold(t, dx, dz)
            return -1
        jump = Jump(t, edge, peer, jid, used, list(dx), list(dz), [], [])
        jump.key = (t, edge, jid >> 1, self.node_id if jid & 1 else peer)
        i = bisect.bisect_right(self._keys, jump.key)
        self.jumps.insert(i, jump)
        self._keys.insert(i, jump.key)
        self._by_id[(edge, jid)] = jump
        return i

    def add_flow(
        self, t: float, *, edge: int, peer: int, jid: int, dx: Sequence[float], dz: Sequence[float]
    ) -> int:
        """Add a flow at ``t`` to jump ``jid`` of ``edge``; return where a pass must start.

        The jump's own input is unchanged (a jump's flow comes after its input), so the pass
        starts after it. A jump not in the window is created without an input (``used=None``,
        completed by :meth:`add_jump` if its exchange settles later); one before the base is
        folded into it, and ``-1`` is returned (pass from 0).
        """
        jump = self._by_id.get((edge, jid))
        if jump is None:
            # A new record has no state before it yet: the pass starts at it.
            return self.add_jump(t, edge=edge, peer=peer, jid=jid, used=None, dx=dx, dz=dz)
        _add_into(jump.dx, dx)
        _add_into(jump.dz, dz)
        return self._index(jump) + 1

    def _index(self, jump: Jump) -> int:
        return bisect.bisect_left(self._keys, jump.key)

    def _fold(self, t: float, dx: Sequence[float], dz: Sequence[float]) -> None:
        mx, mz = mix_values(dx, dz, self.eta, self.t_base - t)
        _add_into(self.base_x, mx)
        _add_into(self.base_z, mz)

    # --- the pass ------------------------------------------------------------------------

    def run(self, start: int) -> dict[int, list[Item]]:
        """Recompute the inputs of the jumps from ``start`` on, in time order; correct them.

        For each correctable jump whose input moved by ``d`` (above the tolerance), its
        ``used`` becomes the exact input and ``-G(d)`` joins its flow (the node's own side,
        applied to its ledger once the peer confirms). Returns, per edge, the corrections to
        send to that edge's peer: ``(jid, t, d)``, for the peer to add ``+G(d)`` at ``t``.
        """
        jumps = self.jumps
        start = max(start, 0)
        if start >= len(jumps):
            return {}
        if start == 0:
            sx, sz = mix_values(self.base_x, self.base_z, self.eta, jumps[0].t - self.t_base)
        else:
            prev = jumps[start - 1]
            sx = [b + f for b, f in zip(prev.bx, prev.dx, strict=True)]
            sz = [b + f for b, f in zip(prev.bz, prev.dz, strict=True)]
            sx, sz = mix_values(sx, sz, self.eta, jumps[start].t - prev.t)
        out: dict[int, list[Item]] = {}
        c, eta, rel = self.c, self.eta, self.rel_tol
        last = len(jumps) - 1
        for k in range(start, last + 1):
            jump = jumps[k]
            jump.bx, jump.bz = sx, sz
            used = jump.used
            if used is not None:
                d = [s - u for s, u in zip(sx, used, strict=True)]
                # Worth a message above rel_tol times the size of the values.
                size = max(map(abs, sx)) + max(map(abs, sz)) + max(map(abs, used))
                if max(map(abs, d)) > rel * size:
                    jump.used = list(sx)
                    for i, di in enumerate(d):
                        jump.dx[i] -= 0.5 * di
                        jump.dz[i] -= c * di
                    out.setdefault(jump.edge, []).append((jump.jid, jump.t, d))
            if k < last:
                ax = [b + f for b, f in zip(sx, jump.dx, strict=True)]
                az = [b + f for b, f in zip(sz, jump.dz, strict=True)]
                sx, sz = mix_values(ax, az, eta, jumps[k + 1].t - jump.t)
        return out

    def revert(self, edge: int, jid: int, t: float, d: Sequence[float]) -> int:
        """Undo an own correction the peer refused; return where a pass must start.

        The jump becomes uncorrectable (the peer will not apply corrections to it any more).
        """
        gx, gz = own_input_flow(d, self.c)
        jump = self._by_id.get((edge, jid))
        if jump is None:
            self._fold(t, gx, gz)
            return 0
        jump.used = None
        _add_into(jump.dx, gx)
        _add_into(jump.dz, gz)
        return self._index(jump) + 1


def _add_into(target: list[float], values: Sequence[float]) -> None:
    for i, v in enumerate(values):
        target[i] += v


class CorrectionQueue:
    """Corrections waiting to be sent, merged per edge and jump, with one message in flight
    per edge.

    Every pass after a change may correct the same later jumps again; sending each pass's
    items at once would multiply messages along every chain of jumps (each one received
    triggers a pass with messages on the node's other edges). Instead the items of an edge wait
    here while a correction on that edge is unacknowledged, and the next message carries, per
    jump, the sum of what accumulated.

    Examples
    --------
    >>> queue = CorrectionQueue()
    >>> queue.add(0, [(3, 2.0, [0.5])])
    >>> queue.take(0)
    [(3, 2.0, [0.5])]
    >>> queue.add(0, [(3, 2.0, [0.25])]); queue.add(0, [(3, 2.0, [0.25])])
    >>> queue.take(0) is None  # one in flight on edge 0
    True
    >>> queue.done(0); queue.take(0)
    [(3, 2.0, [0.5])]
    """

    def __init__(self) -> None:
        self._unsent: dict[int, dict[int, tuple[float, list[float]]]] = {}
        self._busy: set[int] = set()

    def add(self, edge: int, items: list[Item]) -> None:
        """Queue corrections for ``edge``, adding them to those of the same jumps."""
        unsent = self._unsent.setdefault(edge, {})
        for jid, t, d in items:
            known = unsent.get(jid)
            if known is None:
                unsent[jid] = (t, list(d))
            else:
                _add_into(known[1], d)

    def take(self, edge: int) -> list[Item] | None:
        """Return the merged corrections of ``edge`` to send now, or ``None`` (none, or one
        already in flight); the edge is then busy until :meth:`done`."""
        unsent = self._unsent.get(edge)
        if not unsent or edge in self._busy:
            return None
        del self._unsent[edge]
        self._busy.add(edge)
        return [(jid, t, d) for jid, (t, d) in unsent.items()]

    def done(self, edge: int) -> None:
        """The correction in flight on ``edge`` is settled."""
        self._busy.discard(edge)

    def clear(self) -> list[Item]:
        """Forget everything (the node is exiting); return the unsent items, all edges."""
        items = [(jid, t, d) for unsent in self._unsent.values() for jid, (t, d) in unsent.items()]
        self._unsent.clear()
        self._busy.clear()
        return items

    def waiting(self) -> int:
        """Number of jumps with corrections not sent yet."""
        return sum(map(len, self._unsent.values()))
