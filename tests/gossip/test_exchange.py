"""The exchange protocol, sans IO: exchangers joined by an in-memory network the test controls.

No sockets and no clock: the test decides when each frame is delivered, dropped, duplicated or
reordered, and what time it is.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossip.exchange import (
    INITIATOR_TRANSITIONS,
    SERVER_ACTIONS,
    Event,
    Exchanger,
    Link,
    Phase,
    ServerCase,
    TimeBase,
)
from gossip.ledger import Ledger
from gossip.params import gossip_params
from gossip.spectral import graph_quantities
from gossip.topology import Topology, parse_topology
from gossip.wire import LedgerRequest, Nack, Register, Reply, Request, decode, encode


@dataclass
class Frame:
    dest: int
    data: bytes
    route: int | None  # who to answer (the sender of a request); None for answers


@dataclass
class Net:
    """Exchangers of a whole topology, with a network the test drives by hand."""

    topo: Topology
    nodes: dict[int, Exchanger]
    initial: np.ndarray
    now: float = 0.0
    wire: list[Frame] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        spec: str = "line:5",
        algorithm: str = "arg",
        dim: int = 1,
        seed: int = 0,
        max_in_flight: int | None = None,
    ) -> Net:
        topo = parse_topology(spec)
        q = graph_quantities(topo)
        params = gossip_params(algorithm, q.mu_gossip, q.r_max)
        rng = np.random.default_rng(seed)
        initial = rng.normal(size=(topo.n, dim))
        timebase = TimeBase(epoch=0.0, rate=1.0)  # t = now: one time unit per virtual second
        nodes = {}
        for v in range(topo.n):
            links = [Link(e, peer, float(topo.probs[e])) for e, peer in topo.incident(v)]
            ledger = Ledger(initial[v], [link.edge for link in links], eta=params.eta)
            nodes[v] = Exchanger(
                v, links, ledger, params.c, timebase, timeout=1.0, max_in_flight=max_in_flight
            )
        return cls(topo, nodes, initial)

    def tick(self, node: int, which: int) -> None:
        links = self.nodes[node].links
        out = self.nodes[node].initiate(links[which % len(links)].edge, self.now)
        if out is not None:
            self.wire.append(Frame(out.peer, out.frame, node))

    def deliver(self, index: int) -> None:
        frame = self.wire.pop(index % len(self.wire))
        answer = self.nodes[frame.dest].receive(frame.data, self.now)
        if answer is not None and frame.route is not None:
            self.wire.append(Frame(frame.route, answer, None))

    def expire(self) -> None:
        for v, node in self.nodes.items():
            self.wire.extend(Frame(out.peer, out.frame, v) for out in node.expire(self.now))

    def drain(self, rng: np.random.Generator) -> None:
        """Deliver everything, in random order, retrying, until no exchange is pending."""
        for _ in range(1000):
            while self.wire:
                self.deliver(int(rng.integers(len(self.wire))))
            if not any(node.pending for node in self.nodes.values()):
                return
            self.now += 2.0
            self.expire()
        raise AssertionError("exchanges still pending after 1000 rounds")

    def xs(self, t: float) -> np.ndarray:
        return np.array([node.ledger.state(t)[0] for node in self.nodes.values()])

    def error(self, t: float) -> float:
        x = self.xs(t)
        return float(0.5 * np.sum((x - self.initial.mean(axis=0)) ** 2))

    def check_exact(self, counts: bool = True) -> None:
        """Mass conserved, opposite ledgers, every exchange applied at both ends or neither."""
        t = self.now + 1.0
        total = self.xs(t).sum(axis=0)
        scale = np.abs(self.initial).sum()
        np.testing.assert_allclose(total, self.initial.sum(axis=0), rtol=0, atol=1e-10 * scale)
        for e, (u, v) in enumerate(self.topo.edges):
            fu = self.nodes[int(u)].ledger.edge_total(e, t)
            fv = self.nodes[int(v)].ledger.edge_total(e, t)
            np.testing.assert_allclose(fu.dx, -fv.dx, atol=1e-10 * scale)
            np.testing.assert_allclose(fu.dz, -fv.dz, atol=1e-10 * scale)
            if counts:
                at_u = self.nodes[int(u)].activations()[int(v)]
                assert at_u == self.nodes[int(v)].activations()[int(u)]


ops = st.lists(
    st.one_of(
        st.tuples(st.just("tick"), st.integers(0, 99), st.integers(0, 9)),
        st.tuples(st.just("deliver"), st.integers(0, 999), st.just(0)),
        st.tuples(st.just("drop"), st.integers(0, 999), st.just(0)),
        st.tuples(st.just("dup"), st.integers(0, 999), st.just(0)),
        st.tuples(st.just("wait"), st.integers(1, 30), st.just(0)),
    ),
    max_size=120,
)


@given(
    ops,
    st.sampled_from(["line:4", "cycle:5", "star:4"]),
    st.sampled_from(["arg", "rg"]),
    st.sampled_from([None, 1, 2]),
)
@settings(max_examples=150, deadline=None)
def test_any_interleaving_with_drops_and_duplicates_conserves_mass(
    script: list[tuple[str, int, int]], spec: str, algorithm: str, max_in_flight: int | None
) -> None:
    net = Net.build(spec, algorithm, dim=2, max_in_flight=max_in_flight)
    for op, a, b in script:
        if op == "tick":
            net.tick(a % net.topo.n, b)
        elif op == "wait":
            net.now += a / 10
            net.expire()
        elif not net.wire:
            continue
        elif op == "deliver":
            net.deliver(a)
        elif op == "drop":
            net.wire.pop(a % len(net.wire))
        else:
            net.wire.append(net.wire[a % len(net.wire)])
    net.drain(np.random.default_rng(len(script)))
    net.check_exact()
    initiated = sum(node.counters.initiated for node in net.nodes.values())
    failed = sum(node.counters.failed for node in net.nodes.values())
    served = sum(node.counters.served for node in net.nodes.values())
    assert served == initiated - failed  # each exchange applied once by its server, or never


def test_gossip_with_faults_reaches_the_exact_average() -> None:
    """Thousands of exchanges with 10% drops, duplicates and delays, in random order."""
    net = Net.build("cycle:8", "arg", seed=3)
    rng = np.random.default_rng(7)
    start = net.error(0.0)
    for _ in range(6000):
        net.now += rng.exponential(1.0)  # one activation per unit of t, network-wide
        net.tick(int(rng.integers(8)), int(rng.integers(2)))
        held = []  # delayed to the next tick
        while net.wire:
            r, i = rng.random(), int(rng.integers(len(net.wire)))  # random order: reordering
            if r < 0.1:
                net.wire.pop(i)
            elif r < 0.2:
                net.wire.append(net.wire[i])
                net.deliver(i)
            elif r < 0.3:
                held.append(net.wire.pop(i))
            else:
                net.deliver(i)
        net.wire.extend(held)
        net.expire()
    net.drain(rng)
    net.check_exact()
    assert net.error(net.now) < 1e-6 * start
    counters = [node.counters for node in net.nodes.values()]
    assert sum(c.retried for c in counters) > 0
    assert sum(c.duplicates for c in counters) > 0


def test_transition_tables_cover_every_case() -> None:
    live = [p for p in Phase if p is not Phase.DONE]
    assert set(INITIATOR_TRANSITIONS) == set(itertools.product(live, Event))
    assert set(SERVER_ACTIONS) == set(itertools.product([True, False], ServerCase))


def pair(timeout: float = 1.0, max_in_flight: int | None = None) -> tuple[Exchanger, Exchanger]:
    timebase = TimeBase(epoch=100.0, rate=2.0)
    a, b = (
        Exchanger(
            v,
            [Link(0, 1 - v, 1.0)],
            Ledger([1.0 - v], [0], eta=0.1),
            0.5,
            timebase,
            timeout=timeout,
            max_in_flight=max_in_flight,
        )
        for v in (0, 1)
    )
    return a, b


def test_back_pressure_skips_ticks_while_the_edge_is_busy() -> None:
    a, b = pair(max_in_flight=1)
    first = a.initiate(0, now=101.0)
    assert first is not None
    assert a.initiate(0, now=101.1) is None  # one already in flight on this edge
    assert a.counters.skipped == 1
    a.receive(b.receive(first.frame, now=101.2) or b"", now=101.3)
    assert a.initiate(0, now=101.4) is not None


def test_a_repeated_request_is_answered_from_the_cache_and_applied_once() -> None:
    a, b = pair()
    out = a.initiate(0, now=101.0)
    assert out is not None
    assert out.peer == 1
    first = b.receive(out.frame, now=101.5)
    after_first = b.ledger.state(5.0)
    again = b.receive(out.frame, now=102.0)
    assert again == first
    np.testing.assert_array_equal(b.ledger.state(5.0), after_first)
    assert (b.counters.served, b.counters.duplicates) == (1, 1)
    reply = decode(first or b"")
    assert isinstance(reply, Reply)
    assert reply.t == pytest.approx(3.0)  # the server's time: rate * (101.5 - 100)
    a.receive(first or b"", now=101.6)
    a.receive(first or b"", now=101.7)  # a repeated reply is not applied again
    assert a.counters.duplicates == 1
    assert a.pending == 0
    x_a, _ = a.ledger.state(3.0)
    x_b, _ = b.ledger.state(3.0)
    assert float(x_a[0]) == pytest.approx(0.5)  # the average, at the exchange's time
    assert float(x_b[0]) == pytest.approx(0.5)
    assert a.rtt_ms()["p50"] == pytest.approx(600.0)
    assert a.activations() == {1: 1}
    assert b.activations() == {0: 1}


def test_a_forgotten_old_request_is_ignored() -> None:
    a, b = pair()
    first = a.initiate(0, now=101.0)
    assert first is not None
    a.receive(b.receive(first.frame, now=101.0) or b"", now=101.0)
    second = a.initiate(0, now=102.0)  # carries ack=1: b forgets exchange 1's answer
    assert second is not None
    request = decode(second.frame)
    assert isinstance(request, Request)
    assert (request.seq, request.ack, request.t) == (2, 1, 4.0)
    b.receive(second.frame, now=102.0)
    assert b.receive(first.frame, now=103.0) is None
    assert (b.counters.served, b.counters.duplicates) == (2, 1)


def test_timeouts_retry_with_the_same_seq_and_skip_a_stuck_edge() -> None:
    a, b = pair(timeout=0.5)
    out = a.initiate(0, now=101.0)
    assert out is not None
    assert a.next_deadline() == pytest.approx(101.5)
    assert a.expire(now=101.4) == []
    retries = a.expire(now=101.5)
    first, again = decode(out.frame), decode(retries[0].frame)
    assert isinstance(first, Request)
    assert isinstance(again, Request)
    assert (again.seq, again.edge) == (first.seq, first.edge)
    assert again.t == pytest.approx(3.0)  # the values of the moment: 2 * (101.5 - 100)
    assert a.next_deadline() == pytest.approx(102.5)  # doubled
    assert a.initiate(0, now=101.6) is not None  # one retry: the edge is not stuck
    a.expire(now=102.5)
    a.expire(now=104.5)  # third retry: stuck
    assert a.initiate(0, now=104.6) is None
    assert (a.counters.retried, a.counters.skipped) == (5, 1)  # 3 + the second exchange's 2
    # The first copy arrives late; the retry is answered from the cache, applied once.
    answer = b.receive(out.frame, now=104.7)
    assert b.receive(retries[0].frame, now=104.8) == answer
    assert b.counters.served == 1
    a.receive(answer or b"", now=104.9)
    assert a.pending == 1
    assert a.initiate(0, now=105.0) is not None  # no longer stuck


def test_the_first_timeout_adapts_to_measured_round_trips() -> None:
    a, b = pair(timeout=0.5)
    assert a.current_timeout() == 0.5
    for k in range(20):
        out = a.initiate(0, now=101.0 + k)
        assert out is not None
        a.receive(b.receive(out.frame, now=101.0 + k) or b"", now=101.002 + k)
    assert a.current_timeout() == pytest.approx(0.01)  # 2 ms round trips: the floor
    out = a.initiate(0, now=130.0)
    assert out is not None
    assert a.next_deadline() == pytest.approx(130.01)


def test_a_closed_server_nacks_new_requests_and_the_initiator_abandons() -> None:
    a, b = pair()
    answered = a.initiate(0, now=101.0)
    assert answered is not None
    cached = b.receive(answered.frame, now=101.0)
    refused = a.initiate(0, now=101.1)
    assert refused is not None
    b.close()
    before = b.ledger.state(4.0)
    nack = b.receive(refused.frame, now=101.2)
    assert isinstance(decode(nack or b""), Nack)
    np.testing.assert_array_equal(b.ledger.state(4.0), before)
    assert b.receive(answered.frame, now=101.3) == cached  # still answered after closing
    a_before = a.ledger.state(4.0)
    a.receive(nack or b"", now=101.3)
    np.testing.assert_array_equal(a.ledger.state(4.0), a_before)
    assert a.counters.failed == 1
    assert a.pending == 1  # exchange 1's reply is still to come
    b_initiated = b.initiate(0, now=101.4)
    assert b_initiated is None  # closed: no new exchanges
    assert a.abandon_all() == 1


@pytest.mark.parametrize(
    "frame",
    [
        b"garbage",
        encode(Register(name="x", address="tcp://a:1", value=None, pid=1)),
        encode(Request(src=5, edge=0, seq=1, ack=0, t=2.0, x=(1.0,), z=(1.0,))),  # unknown peer
        encode(Request(src=0, edge=9, seq=1, ack=0, t=2.0, x=(1.0,), z=(1.0,))),  # unknown edge
        encode(Request(src=0, edge=0, seq=1, ack=0, t=2.0, x=(1.0, 2.0), z=(1.0, 2.0))),  # dim
        encode(Request(src=0, edge=0, seq=1, ack=0, t=1e9, x=(1.0,), z=(1.0,))),  # skew
        encode(Request(src=0, edge=0, seq=1, ack=0, t=2.0, x=(1e308,), z=(-1e308,))),  # overflow
        encode(Reply(src=0, edge=0, seq=7, t=2.0, dx=(1.0,), dz=(1.0,))),  # never sent
        encode(Request(src=0, edge=0, seq=1, ack=0, t=2.0, x=(1.0,), z=(1.0,)))[:-3],  # cut
    ],
    ids=["garbage", "register", "peer", "edge", "dim", "skew", "overflow", "unsent", "cut"],
)
def test_bad_frames_are_rejected_counted_and_change_nothing(frame: bytes) -> None:
    _, b = pair()
    before = b.ledger.state(3.0)
    assert b.receive(frame, now=101.0) is None
    assert b.counters.rejected == 1
    assert b.counters.served == 0
    np.testing.assert_array_equal(b.ledger.state(3.0), before)


def test_a_restarted_node_recovers_its_exact_state_from_its_neighbours() -> None:
    net = Net.build("line:3", "arg", seed=5)
    rng = np.random.default_rng(0)
    for _ in range(200):
        net.now += 0.3
        net.tick(int(rng.integers(3)), int(rng.integers(2)))
        while net.wire:
            net.deliver(0)
    lost_t = net.now + 1.0
    lost = net.nodes[1].ledger.state(lost_t)
    old = net.nodes[1]
    links = list(old.links)
    fresh = Exchanger(
        1,
        links,
        Ledger(net.initial[1], [link.edge for link in links], eta=old.eta),
        old.c,
        old.timebase,
        recover=True,
    )
    net.nodes[1] = fresh
    assert fresh.recovering
    assert fresh.initiate(links[0].edge, net.now) is None
    # A neighbour's request while recovering is refused, not applied.
    net.tick(0, 0)
    net.deliver(0)
    assert isinstance(decode(net.wire[-1].data), Nack)
    net.deliver(0)
    for out in fresh.ledger_requests():
        assert isinstance(decode(out.frame), LedgerRequest)
        net.wire.append(Frame(out.peer, out.frame, 1))
    while net.wire:
        net.deliver(0)
    assert not fresh.recovering
    np.testing.assert_allclose(fresh.ledger.state(lost_t), lost, rtol=1e-12, atol=1e-15)
    for _ in range(100):  # and it gossips on, exactly
        net.now += 0.3
        net.tick(int(rng.integers(3)), int(rng.integers(2)))
        while net.wire:
            net.deliver(0)
    net.check_exact(counts=False)  # the restarted node counts from 0 again
