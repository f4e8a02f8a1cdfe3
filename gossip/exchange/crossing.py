"""Crossing requests: both ends of an edge ask each other at once, and neither is refused.

Nodes v and w, the ends of edge e, each start an exchange with the other before either has
answered: v's request M reaches w while w's own request E to v is in flight, and E reaches v
while M is. Each is engaged (:mod:`gossip.exchange.exchanger`), so neither may serve the other the
usual way, and if each waited for the other neither would ever settle. Up to protocol
version 3 the lower id's request was refused: a Busy, a pause and a second request, for about
one activation in ten near a live cluster's ceiling, where that extra load is what tipped it
over.

**The rule.** Every request carries ``served``: the highest seq of the *server's* requests on
its edge that the initiator had answered (in any way) when it read the values it sends.

1. w, engaged with E toward v, receives v's M (:func:`standing_toward_peer`):

   * ``M.served >= E.seq``: v answered E before reading M's values. That answer is on its
     way; M waits for it, and is then decided like any request.
   * otherwise they crossed. At the lower id's end the other's request waits. At the higher
     id's end the other's request is served at once, although the node is engaged. If the
     node's own request may move (gossip's ``u = x``, sent with ``z``), it stays and is
     caught up (step 2). If it may not (an exchanged ``g(x)``, the paper's Section 7), the node
     *withdraws* it: the request is dropped, the node is free, and the activation starts
     again at once, with its values after that jump (step 3).

2. **Catching up.** When the lower end v decides E (once M has settled), E's values lack the
   jump the higher end w applied for M after reading them (``E.served < M.seq``). v knows
   that jump: ``-(dx, dz)`` at ``T_s``, from M's reply. The mixing ODE is linear, so w's
   value at v's jump time ``T' >= max(T_E, T_s)`` is E's ``(u, z)`` mixed from ``T_E``, minus
   ``(dx, dz)`` mixed from ``T_s`` (:func:`caught_up`); v serves E with it. A request can
   lack only one jump this way, the last exchange v started on the edge and applied (kept in
   :class:`~gossip.exchange.vocabulary.EdgeState`). One that lacks more (w crossed two of v's while
   E was on its way), or cannot move, or lacks a jump of an earlier membership view, is
   refused (:func:`catchable`): a refusal is always exact.

3. **Withdrawing.** A withdrawn request E is never served: v, the lower id, holds it while
   engaged with M, and once M's reply is applied, E lacks M's jump and cannot move, so v
   refuses it (:func:`catchable`); w has forgotten E, and takes that Busy as a duplicate.
   Only if v's lock was *released* (w silent, :mod:`gossip.exchange.exchanger`) could v serve E
   before M's reply; so a request that cannot move, from a higher id, that crossed an
   exchange of ours still pending, is refused (:func:`crosses_pending`). Before version 5
   of the protocol the lower id's request was refused instead: a Busy, a pause and a
   second request, where a withdrawal costs nothing but the new request, started at once.

**Why it stays exact, and cannot livelock**: the proof is in docs/design.md, "Crossing
requests". In short, each end's values at a crossed jump are those the sequential process has
just before it (the lower id serves nothing while engaged; the higher id catches up exactly one
jump or withdraws its request), and every withdrawal comes with a jump applied. Counted:
``counters.crossed`` (served at once, engaged), ``counters.caught_up`` and
``counters.withdrawn``.
"""

from __future__ import annotations

import numpy as np

from continuized.gossip.errors import LocalError
from continuized.gossip.exchange.vocabulary import EdgeState, Pending, Standing
from continuized.gossip.model.mixing import Values, mix_values
from continuized.gossip.wire.schema import Request

__all__ = [
    "catchable",
    "caught_up",
    "crosses_pending",
    "lacks_jump",
    "remember_applied",
    "standing_toward_peer",
]


def standing_toward_peer(msg: Request, engaged: Pending, node_id: int) -> Standing:
    """Where a node engaged with ``engaged`` stands toward a request from that exchange's own
    peer (step 1): ``WAIT``, or ``CROSSING`` (serve now; withdraw ``engaged`` if it cannot
    move, step 3)."""
    if msg.served >= engaged.seq or msg.src > node_id:
        return Standing.WAIT
    return Standing.CROSSING


def crosses_pending(msg: Request, state: EdgeState, node_id: int, movable: bool) -> bool:
    """Whether ``msg`` may be a withdrawn request (step 3): it cannot move, comes from a higher
    id, and its sender had not answered an exchange of ours on the edge still pending."""
    if movable or msg.src < node_id:
        return False
    return any(seq > msg.served for seq in state.pending)


def lacks_jump(msg: Request, state: EdgeState) -> bool:
    """Whether ``msg``'s values lack the last jump of ours on its edge: its sender answered
    that exchange of ours after reading them."""
    return msg.served < state.applied


def catchable(msg: Request, state: EdgeState, movable: bool, view_start: float) -> bool:
    """Whether a request that lacks our last jump may be caught up past it (step 2): it lacks
    no other, it may move (``movable``: sent with z, in this view), and the jump is of this
    view (which starts at ``view_start``)."""
    jump = state.applied_jump
    return (
        msg.served >= state.applied_before
        and movable
        and jump is not None
        and jump[0] >= view_start
    )


def caught_up(msg: Request, state: EdgeState, eta: float, t: float) -> Values:
    """The sender's x at ``t`` (``t`` at least its T and our last jump's): its ``(u, z)`` mixed
    from its T, minus our last jump's ``(dx, dz)`` mixed from that jump's time."""
    if msg.z is None or state.applied_jump is None:
        raise LocalError("only a movable request lacking a known jump can be caught up")
    when, dx, dz = state.applied_jump
    x, _ = mix_values(msg.u, msg.z, eta, t - msg.t)
    jump_x, _ = mix_values(dx, dz, eta, t - when)
    if isinstance(x, np.ndarray) or isinstance(jump_x, np.ndarray):  # a model's parameters
        return np.asarray(x, dtype=np.float64) - np.asarray(jump_x, dtype=np.float64)
    return [xi - ji for xi, ji in zip(x, jump_x, strict=True)]


def remember_applied(state: EdgeState, seq: int, jump: tuple[float, Values, Values] | None) -> None:
    """Record that our exchange ``seq`` on the edge was applied, with its jump into us,
    ``(T, dx, dz)``; ``None`` if no request may be caught up past it (another view's)."""
    state.applied_before, state.applied = state.applied, seq
    state.applied_jump = jump
