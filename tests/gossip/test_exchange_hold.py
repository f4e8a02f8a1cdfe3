"""Hold mode of the exchange protocol: one exchange of ours in flight, higher ids deferred."""

from __future__ import annotations

import numpy as np
import pytest

from gossip.exchange import DEFERRED, Exchanger, Link, TimeBase
from gossip.ledger import Ledger
from gossip.params import gossip_params
from gossip.spectral import graph_quantities
from gossip.topology import parse_topology
from gossip.wire import Reply, decode


def build(spec: str, seed: int = 0) -> tuple[dict[int, Exchanger], np.ndarray]:
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    params = gossip_params("arg", q.mu_gossip, q.r_max)
    values = np.random.default_rng(seed).normal(size=topo.n)
    nodes = {}
    for v in range(topo.n):
        links = [Link(e, peer, float(topo.probs[e])) for e, peer in topo.incident(v)]
        ledger = Ledger([values[v]], [link.edge for link in links], eta=params.eta)
        nodes[v] = Exchanger(v, links, ledger, params.c, TimeBase(0.0, 1.0), timeout=1.0, hold=True)
    return nodes, values


def edge_to(node: Exchanger, peer: int) -> int:
    return next(link.edge for link in node.links if link.peer == peer)


def test_a_busy_node_defers_higher_ids_and_serves_them_once_free() -> None:
    nodes, _ = build("line:3")
    one = nodes[1]
    to_zero = one.initiate(edge_to(one, 0), 1.0)
    assert to_zero is not None
    assert one.busy
    from_two = nodes[2].initiate(edge_to(nodes[2], 1), 1.5)
    assert from_two is not None
    before = one.ledger.state_values(2.0)
    assert one.receive(from_two.frame, 2.0) is DEFERRED
    assert one.deferred == 1
    assert one.ledger.state_values(2.0) == before
    assert one.release(2.5) == []  # still busy
    reply = nodes[0].receive(to_zero.frame, 3.0)
    assert reply is not None
    assert one.receive(reply, 3.0) is None
    assert not one.busy
    [answer] = one.release(4.0)
    assert answer is not None
    message = decode(answer)
    assert isinstance(message, Reply)
    assert message.t == 4.0
    assert one.counters.served == 1
    assert one.deferrals == 1
    assert one.deferred == 0


def test_a_busy_node_serves_lower_ids_at_once() -> None:
    nodes, _ = build("line:3")
    one = nodes[1]
    assert one.initiate(edge_to(one, 2), 1.0) is not None
    from_zero = nodes[0].initiate(edge_to(nodes[0], 1), 1.0)
    assert from_zero is not None
    answer = one.receive(from_zero.frame, 2.0)
    assert answer is not None
    assert answer is not DEFERRED
    assert isinstance(decode(answer), Reply)


def test_release_can_be_forced_while_busy() -> None:
    nodes, _ = build("line:3")
    one = nodes[1]
    assert one.initiate(edge_to(one, 0), 1.0) is not None
    from_two = nodes[2].initiate(edge_to(nodes[2], 1), 1.0)
    assert from_two is not None
    assert one.receive(from_two.frame, 2.0) is DEFERRED
    [answer] = one.release(3.0, force=True)
    assert answer is not None
    assert isinstance(decode(answer), Reply)


@pytest.mark.parametrize("seed", range(4))
def test_random_schedules_never_deadlock_and_stay_exact(seed: int) -> None:
    """Every node initiates whenever free; frames arrive in random order; all settle."""
    nodes, values = build("cycle:6", seed)
    rng = np.random.default_rng(seed)
    wire: list[tuple[int, bytes, int | None]] = []  # (destination, frame, route)
    routes: dict[int, list[int | None]] = {v: [] for v in nodes}
    now = 0.0

    def deliver(dest: int, frame: bytes, route: int | None) -> None:
        node = nodes[dest]
        answer = node.receive(frame, now)
        if answer is DEFERRED:
            routes[dest].append(route)
        elif answer is not None and route is not None:
            wire.append((route, answer, None))
        if not node.pending:
            for late in node.release(now):
                back = routes[dest].pop(0)
                if late is not None and back is not None:
                    wire.append((back, late, None))

    for _ in range(400):
        now += 0.01
        v = int(rng.integers(len(nodes)))
        if not nodes[v].busy:
            links = nodes[v].links
            out = nodes[v].initiate(links[int(rng.integers(len(links)))].edge, now)
            assert out is not None
            wire.append((out.peer, out.frame, v))
        if wire and rng.random() < 0.7:
            deliver(*wire.pop(int(rng.integers(len(wire)))))
    for _ in range(10_000):  # no new exchanges: everything in flight must settle
        if not wire:
            break
        now += 0.01
        deliver(*wire.pop(int(rng.integers(len(wire)))))
    assert not wire
    assert all(not node.pending and not node.deferred for node in nodes.values())
    initiated = sum(node.counters.initiated for node in nodes.values())
    assert initiated > 100
    assert sum(node.counters.served for node in nodes.values()) == initiated
    assert sum(node.deferrals for node in nodes.values()) > 0
    x = np.array([node.ledger.state(now)[0][0] for node in nodes.values()])
    assert x.sum() == pytest.approx(values.sum(), abs=1e-9 * np.abs(values).sum())
