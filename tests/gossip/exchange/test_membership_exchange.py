"""A leave and a join amid asynchronous exchanges: the protocol switches views exactly.

The exchangers of :mod:`_exactnet` (frames delayed and reordered at random, some repeated)
get the next membership view at a shared ``T_e``: from then on they start and serve no jump
at ``T >= T_e`` in the old view, and each switches (:meth:`Exchanger.switch_view`, with the
ledger of :func:`gossip.exchange.membership.carry_ledger`) at its first free moment after ``T_e``;
the leaver closes. At quiescence every member's ``(x, z)`` must equal the sequential replay of the
jumps read off the wire, each jump computed with the parameters of the view holding its T and
the settlement rule applied at ``T_e``; the members' sums must equal their initial total.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _exactnet import ExactNet, Frame

from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.membership import (
    View,
    carry_ledger,
    first_view,
    join_view,
    leave_view,
)
from continuized.gossip.exchange.vocabulary import Link, TimeBase
from continuized.gossip.model.jumps import edge_flow_values
from continuized.gossip.model.ledger import Ledger

TIMEBASE_RATE = 1.0  # ExactNet's: t = now


def switch_all(net: ExactNet, old: View, new: View, done: set[int], joiner_value: float) -> None:
    """Switch every node that is free and past T_e (the leaver closes)."""
    for v, node in list(net.nodes.items()):
        if v in done or net.now < new.start:
            continue
        if v not in new.members:  # the leaver stops at once, engaged or not (node.switchover)
            done.add(v)
            node.close()
            net._flush(v, [])  # deferred requests, now Nacked
            continue
        if node.engaged:
            continue
        done.add(v)
        ledger, _ = carry_ledger(node.ledger, old, new, v)
        links = [Link(e, p, new.prob(e)) for e, p in new.incident(v)]
        node.switch_view(ledger, links, new.c, new.start)
    for v in new.members:
        if v not in net.nodes:  # the joiner: its value, zero rows, from T_e
            edges = new.incident(v)
            ledger = Ledger([joiner_value], [e for e, _ in edges], new.eta, t0=new.start)
            net.nodes[v] = Exchanger(
                v,
                [Link(e, p, new.prob(e)) for e, p in edges],
                ledger,
                new.c,
                next(iter(net.nodes.values())).timebase,
                timeout=1e6,
                min_timeout=1e6,
                max_skew=1e5,
                max_timeout=4e6,
                rng=v,
                backoff=1.0,
            )
            net.nodes[v]._state.last = new.start
            done.add(v)


def tick(net: ExactNet, view: View) -> None:
    k = int(net.rng.integers(len(view.edges)))
    v = view.edges[k][int(net.rng.integers(2))]
    net.ticks += 1
    out = net.nodes[v].initiate(view.ids[k], net.now)
    if out is not None:
        net.wire.append(Frame(out.peer, out.frame, v))


def run(net: ExactNet, old: View, new: View, steps: int, dup: float, value: float) -> None:
    done: set[int] = set()
    for _ in range(steps):
        net.now += float(net.rng.exponential(1.0))
        view = new if net.now >= new.start else old
        if not net.wire or net.rng.random() < 0.3:
            tick(net, view)
        else:
            net.deliver(0.0, dup)
        net.expire()
        switch_all(net, old, new, done, value)
    assert done >= set(new.members) | set(old.members)  # everyone switched (or left)
    for v in set(old.members) - set(new.members):
        # The leaver exits. A request of its own still pending reached its neighbour after
        # that one had switched, on an edge it settled: rejected, never applied or answered.
        leaver = net.nodes[v]
        pending = [
            (e, state.link.peer) for e, state in leaver._state.edges.items() if state.pending
        ]
        assert all(edge not in {k.edge for k in net.nodes[peer].links} for edge, peer in pending)
        leaver.abandon_all()


def replay(net: ExactNet, old: View, new: View, value: float, t_end: float) -> dict[int, Ledger]:
    """The jumps in T order with the core functions, the views switched at T_e."""
    ledgers = {
        v: Ledger(net.initial[v], [e for e, _ in old.incident(v)], old.eta) for v in old.members
    }
    switched = False
    for t, _, edge in sorted(net.jumps):
        if t >= new.start and not switched:
            ledgers = _carry(ledgers, old, new, value)
            switched = True
        view = new if switched else old
        u, w = view.edges[view.ids.index(edge)]
        xu, _ = ledgers[u].state_values(t)
        xw, _ = ledgers[w].state_values(t)
        dx, dz = edge_flow_values(xu, xw, view.c)
        ledgers[u].add_values(edge, dx, dz, t)
        ledgers[w].add_values(edge, dx, dz, t, sign=-1.0)
    return ledgers if switched else _carry(ledgers, old, new, value)


def _carry(ledgers: dict[int, Ledger], old: View, new: View, value: float) -> dict[int, Ledger]:
    out = {v: carry_ledger(ledgers[v], old, new, v)[0] for v in new.members if v in ledgers}
    for v in new.members:
        if v not in out:
            out[v] = Ledger([value], [e for e, _ in new.incident(v)], new.eta, t0=new.start)
    return out


CASES = [("line:8", "leave", 7), ("grid:3x3", "leave", 4), ("line:6", "join", 6)]


@pytest.mark.parametrize(("spec", "kind", "node"), CASES)
@pytest.mark.parametrize("dup", [0.0, 0.05])
def test_a_view_switch_amid_exchanges_equals_the_sequential_replay(
    spec: str, kind: str, node: int, dup: float
) -> None:
    net = ExactNet.build(spec, "arg", 7)
    old = first_view(net.topo.n, [tuple(int(i) for i in e) for e in net.topo.edges])
    assert old.ids == tuple(range(len(net.topo.edges)))  # the bootstrap's edge indices
    net.run(steps=400, tick_share=0.3, dup=dup)
    t_e = net.now + 30.0
    new = leave_view(old, node, t_e) if kind == "leave" else join_view(old, node, [0, 3], t_e)
    value = 9.0
    for ex in net.nodes.values():
        ex.horizon = t_e  # announced: no jump at T >= T_e in the old view
    run(net, old, new, steps=900, dup=dup, value=value)
    net.quiesce(dup=dup)
    t_end = net.now + 1.0
    oracle = replay(net, old, new, value, t_end)
    assert sum(1 for j in net.jumps if j[0] >= t_e) > 100  # gossip went on in the new view
    assert sum(1 for j in net.jumps if j[0] < t_e) > 50
    total = 0.0
    sum_x, sum_z = [], []
    for v in new.members:
        x, z = net.nodes[v].ledger.state(t_end)
        rx, rz = oracle[v].state(t_end)
        assert abs(x[0] - rx[0]) < 1e-9
        assert abs(z[0] - rz[0]) < 1e-9
        sum_x.append(x[0])
        sum_z.append(z[0])
        total += value if v not in old.members else float(net.initial[v][0])
    assert math.fsum(sum_x) == pytest.approx(total, abs=1e-9)
    assert math.fsum(sum_z) == pytest.approx(total, abs=1e-9)
    # No jump mixed views: after T_e only the new view's edges, each with the new c.
    new_edges = set(new.ids)
    assert all(edge in new_edges for t, _, edge in net.jumps if t >= t_e)
    if kind == "leave":
        gone = {e for e, _ in old.incident(node)}
        assert not any(edge in gone for t, _, edge in net.jumps if t >= t_e)
        assert net.total("refused") > 0


def test_a_late_reply_on_a_settled_edge_is_rejected_and_counted() -> None:
    net = ExactNet.build("line:4", "arg", 1)
    old = first_view(4, [(0, 1), (1, 2), (2, 3)])
    out = net.nodes[2].initiate(2, 0.0)  # node 2 asks the leaver, node 3, at t = 0
    assert out is not None
    answer = net.nodes[3].receive(out.frame, 0.0, b"2")
    assert answer is not None
    # Node 2 must be free to switch: release it as a stuck exchange would be, then switch.
    net.nodes[2]._initiator.engaged = None
    new = leave_view(old, 3, 5.0)
    ledger, _ = carry_ledger(net.nodes[2].ledger, old, new, 2)
    before = net.nodes[2].ledger.state(6.0)
    links = [Link(e, p, new.prob(e)) for e, p in new.incident(2)]
    assert net.nodes[2].switch_view(ledger, links, new.c, new.start) == 1
    rejected = net.nodes[2].counters.rejected
    net.nodes[2].receive(answer, 6.0)
    assert net.nodes[2].counters.rejected == rejected + 1
    np.testing.assert_allclose(net.nodes[2].ledger.state(6.0), before, atol=0)


def test_a_released_exchange_answered_after_two_quick_views_keeps_the_survivors_sum() -> None:
    """Two deaths in one coordinator tick: views 1 and 2 start a nanosecond apart. Node 0's
    exchange with node 1 (both survive) was applied by node 1 in view 0, but its reply comes
    only after node 0 released its lock (silent peer) and went through both switches: it must
    be mixed through both views and applied, or the survivors' sum drifts."""
    view0 = first_view(4, [(u, v) for u in range(4) for v in range(u + 1, 4)])
    view1 = leave_view(view0, 2, start=40.0)
    view2 = leave_view(view1, 3, start=40.0 + 1e-9)
    base = TimeBase(0.0, 1.0)
    values = {0: 1.0, 1: -3.0}
    nodes = {
        v: Exchanger(
            v,
            [Link(e, p, view0.prob(e)) for e, p in view0.incident(v)],
            Ledger([values[v]], [e for e, _ in view0.incident(v)], view0.eta),
            view0.c,
            base,
            timeout=1.0,
            min_timeout=1.0,
            max_timeout=1.0,
            rng=v,
        )
        for v in (0, 1)
    }
    edge = view0.edge_index(0, 1)
    out = nodes[0].initiate(edge, 1.0)
    assert out is not None
    reply = nodes[1].receive(out.frame, 1.0)  # node 1 applies its half at T = 1 (view 0)
    assert reply is not None
    now = 1.0
    while nodes[0].engaged:  # the reply is lost until node 0 gives up the lock
        now += 1.5
        nodes[0].expire(now)
        assert now < view1.start
    for old, new in ((view0, view1), (view1, view2)):
        for v, node in nodes.items():
            ledger, _ = carry_ledger(node.ledger, old, new, v)
            node.switch_view(
                ledger, [Link(e, p, new.prob(e)) for e, p in new.incident(v)], new.c, new.start
            )
    rejected = nodes[0].counters.rejected
    nodes[0].receive(reply, 45.0)  # now it comes
    assert nodes[0].counters.rejected == rejected
    assert nodes[0].pending == 0
    # Nodes 0 and 1 share only edge {0, 1} among survivors here (2 and 3 settled): their rows
    # on it are opposite, so their sums are their initial total, at any time.
    states = [nodes[v].state(50.0) for v in (0, 1)]
    assert abs(sum(float(s[1][0]) for s in states) - sum(values.values())) <= 1e-12
    assert abs(sum(float(s[2][0]) for s in states) - sum(values.values())) <= 1e-12
