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

from continuized.gossip.exchange.exchanger import DEFERRED, Exchanger
from continuized.gossip.exchange.vocabulary import (
    INITIATOR_TRANSITIONS,
    SERVER_ACTIONS,
    Event,
    Link,
    Phase,
    ServerCase,
    Standing,
    TimeBase,
)
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import Topology, parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.jumps import edge_flow_values
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.model.mixing import mix_values
from continuized.gossip.wire.schema import (
    Busy,
    LedgerRequest,
    Nack,
    Register,
    Reply,
    Request,
    decode,
    encode,
)


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
        node = self.nodes[frame.dest]
        route = None if frame.route is None else str(frame.route).encode()
        answer = node.receive(frame.data, self.now, route)
        if answer is not None and answer != DEFERRED and frame.route is not None:
            self.wire.append(Frame(frame.route, answer, None))
        self.flush(frame.dest)

    def flush(self, v: int) -> None:
        node = self.nodes[v]
        self.wire.extend(Frame(out.peer, out.frame, v) for out in node.take_outgoing())
        for route, answer in node.take_released():
            assert route is not None
            self.wire.append(Frame(int(route), answer, None))

    def expire(self) -> None:
        for v, node in self.nodes.items():
            self.wire.extend(Frame(out.peer, out.frame, v) for out in node.expire(self.now))
            self.flush(v)

    def drain(self, rng: np.random.Generator) -> None:
        """Deliver everything, in random order, retrying, until no exchange is pending."""
        for _ in range(1000):
            while self.wire:
                self.deliver(int(rng.integers(len(self.wire))))
            if not any(node.pending or node.waiting for node in self.nodes.values()):
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
    bounced = sum(node.counters.bounced for node in net.nodes.values())
    served = sum(node.counters.served for node in net.nodes.values())
    # Each exchange applied once by its server, or never (refused, or abandoned).
    assert served == initiated - failed - bounced


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
    assert set(SERVER_ACTIONS) == set(itertools.product(Standing, ServerCase))


def pair(
    timeout: float = 1.0, max_in_flight: int | None = None, movable: bool = True
) -> tuple[Exchanger, Exchanger]:
    """Nodes 0 and 1 on edge 0 (t = 2 (now - 100)); ``movable=False`` sends u = g(x) = x
    without z, as the optimization case does: no jump of theirs can move or be caught up."""
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
            exchange_value=None if movable else (lambda x: x),
        )
        for v in (0, 1)
    )
    return a, b


def replay_pair(jumps: list[tuple[float, int]], t_end: float) -> np.ndarray:
    """The sequential process of :func:`pair`: ``jumps`` are (T, initiator), applied one after
    the other in the order given (T non-decreasing); returns each node's (x, z) at ``t_end``,
    shape (2, 2)."""
    state = [([1.0], [1.0]), ([0.0], [0.0])]
    now = 0.0
    for when, v in jumps:
        assert when >= now
        state = [mix_values(x, z, 0.1, when - now) for x, z in state]
        dx, dz = edge_flow_values(state[v][0], state[1 - v][0], 0.5, 0.5)  # into v
        for w, sign in ((v, 1.0), (1 - v, -1.0)):
            x, z = state[w]
            state[w] = ([x[0] + sign * dx[0]], [z[0] + sign * dz[0]])
        now = when
    state = [mix_values(x, z, 0.1, t_end - now) for x, z in state]
    return np.array([[x[0], z[0]] for x, z in state])


def states_of(*nodes: Exchanger, t: float) -> np.ndarray:
    return np.array([np.concatenate(node.ledger.state(t)) for node in nodes])


def test_a_crossing_request_that_cannot_move_is_served_and_the_higher_id_withdraws_its_own() -> (
    None
):
    """u = g(x) cannot be caught up past a jump. b, the higher id, serves a's crossing request
    at once, drops its own (withdrawn) and asks again at once with its values after that
    jump; a refuses the withdrawn one when it comes, and b takes that Busy as a duplicate."""
    a, b = pair(movable=False)
    mine = b.initiate(0, now=101.0, due=2.0)  # b is engaged with its own exchange: T = 2.0
    theirs = a.initiate(0, now=101.0)
    assert mine is not None
    assert theirs is not None
    reply = b.receive(theirs.frame, now=101.1)
    assert isinstance(decode(reply or b""), Reply)
    assert b.receive(theirs.frame, now=101.2) == reply  # a repeat: the same reply, cached
    assert (b.counters.crossed, b.counters.withdrawn, b.counters.refused) == (1, 1, 0)
    (again,) = b.take_outgoing()  # started at once, no pause: a new request, at its tick's T
    request = decode(again.frame)
    assert isinstance(request, Request)
    assert (request.seq, request.served, request.t) == (2, 1, pytest.approx(2.0))
    assert (b.engaged, b.pending, b.waiting, b.counters.bounced) == (True, 1, 0, 0)
    a.receive(reply or b"", now=101.3)
    busy = a.receive(mine.frame, now=101.3)  # the withdrawn one lacks a's jump: refused
    assert isinstance(decode(busy or b""), Busy)
    b.receive(busy or b"", now=101.4)
    assert (b.counters.bounced, b.counters.duplicates, b.engaged) == (0, 2, True)
    second = a.receive(again.frame, now=101.4)
    assert isinstance(decode(second or b""), Reply)
    b.receive(second or b"", now=101.5)
    assert (a.activations(), b.activations()) == ({1: 2}, {0: 2})
    assert [(n.engaged, n.pending, n.waiting) for n in (a, b)] == [(False, 0, 0)] * 2
    expected = replay_pair([(2.0, 0), (2.0, 1)], t_end=5.0)
    np.testing.assert_allclose(states_of(a, b, t=5.0), expected, rtol=0, atol=1e-14)


def test_a_request_that_may_be_withdrawn_is_refused_while_our_released_one_is_pending() -> None:
    """a's lock on its request to b was released (b silent). b may have served it and
    withdrawn its own crossing request: a must not serve that one, which b has forgotten."""
    a, b = pair(timeout=0.01, movable=False)
    theirs = a.initiate(0, now=101.0)
    mine = b.initiate(0, now=101.0)
    assert theirs is not None
    assert mine is not None
    now = 101.0
    while a.engaged:  # b silent: retries until the lock is released
        deadline = a.next_deadline()
        assert deadline is not None
        now = deadline
        a.expire(now)
    assert (a.counters.released, a.pending) == (1, 1)
    busy = a.receive(mine.frame, now=now)
    assert isinstance(decode(busy or b""), Busy)
    assert a.counters.served == 0
    reply = b.receive(theirs.frame, now=now)  # b serves a's, withdraws its own
    assert b.counters.withdrawn == 1
    b.receive(busy or b"", now=now)  # a duplicate for b: never applied
    a.receive(reply or b"", now=now)
    (again,) = b.take_outgoing()
    b.receive(a.receive(again.frame, now=now) or b"", now=now)
    assert (a.activations(), b.activations()) == ({1: 2}, {0: 2})
    x, z = states_of(a, b, t=5.0).T
    assert (float(x.sum()), float(z.sum())) == (pytest.approx(1.0), pytest.approx(1.0))


def test_when_each_asks_the_other_the_higher_id_serves_at_once_and_the_lower_catches_up() -> None:
    a, b = pair()  # ids 0 and 1, each engaged with the other
    mine = a.initiate(0, now=101.0)  # T = 2.0
    theirs = b.initiate(0, now=101.1)  # T = 2.2; b has answered none of a's: served = 0
    assert mine is not None
    assert theirs is not None
    assert a.receive(theirs.frame, now=101.2, route=b"to-b") == DEFERRED  # the lower id waits
    assert a.receive(theirs.frame, now=101.25, route=b"to-b") is None  # a retry: still waits
    assert (a.counters.deferred, a.counters.duplicates, a.take_released()) == (1, 1, [])
    reply = b.receive(mine.frame, now=101.3)  # b serves a's at once, although engaged
    answer = decode(reply or b"")
    assert isinstance(answer, Reply)
    assert answer.t == pytest.approx(2.0)
    assert (b.engaged, b.counters.crossed, b.counters.refused) == (True, 1, 0)
    a.receive(reply or b"", now=101.4)  # a is free: b's request is decided now, caught up
    released = a.take_released()
    assert [route for route, _ in released] == [b"to-b"]
    second = decode(released[0][1])
    assert isinstance(second, Reply)
    assert second.t == pytest.approx(2.2)  # b's own time: after a's jump at 2.0, not moved
    assert (a.counters.caught_up, a.counters.refused, a.counters.postponed) == (1, 0, 0)
    b.receive(released[0][1], now=101.5)
    assert (a.activations(), b.activations()) == ({1: 2}, {0: 2})
    assert a.counters.bounced == b.counters.bounced == 0  # no Busy, no second request
    expected = replay_pair([(2.0, 0), (2.2, 1)], t_end=5.0)
    np.testing.assert_allclose(states_of(a, b, t=5.0), expected, rtol=0, atol=1e-14)


def test_a_crossed_request_older_than_the_jump_it_lacks_is_caught_up_and_moved() -> None:
    a, b = pair()
    theirs = b.initiate(0, now=101.0)  # b first: T = 2.0, then a at T = 2.4
    mine = a.initiate(0, now=101.2)
    assert theirs is not None
    assert mine is not None
    assert a.receive(theirs.frame, now=101.3, route=b"to-b") == DEFERRED
    reply = b.receive(mine.frame, now=101.3)  # served at a's 2.4, after b's own T
    a.receive(reply or b"", now=101.4)
    ((_, frame),) = a.take_released()
    second = decode(frame)
    assert isinstance(second, Reply)
    assert second.t == pytest.approx(2.4)  # moved past a's jump, with b's lacking values
    assert (a.counters.caught_up, a.counters.postponed) == (1, 1)
    b.receive(frame, now=101.5)
    expected = replay_pair([(2.4, 0), (2.4, 1)], t_end=5.0)  # a's jump, then b's at once
    np.testing.assert_allclose(states_of(a, b, t=5.0), expected, rtol=0, atol=1e-14)


def test_a_request_from_a_peer_that_answered_ours_waits_for_that_answer() -> None:
    """b is engaged toward a; a served b's request, then asked b itself (served = b's seq).
    b must not serve it before a's reply arrives: b's values would lack that jump."""
    a, b = pair()
    theirs = b.initiate(0, now=101.0)
    assert theirs is not None
    reply = a.receive(theirs.frame, now=101.1)  # a is free: serves at once; reply in flight
    mine = a.initiate(0, now=101.2)
    assert mine is not None
    request = decode(mine.frame)
    assert isinstance(request, Request)
    assert request.served == 1
    assert b.receive(mine.frame, now=101.3, route=b"to-a") == DEFERRED  # not served crossed
    assert b.counters.crossed == 0
    b.receive(reply or b"", now=101.4)
    ((_, frame),) = b.take_released()
    a.receive(frame, now=101.5)
    assert (a.counters.caught_up, b.counters.caught_up, b.counters.refused) == (0, 0, 0)
    expected = replay_pair([(2.0, 1), (2.4, 0)], t_end=5.0)
    np.testing.assert_allclose(states_of(a, b, t=5.0), expected, rtol=0, atol=1e-14)


def test_a_request_that_lacks_two_of_our_jumps_is_refused_and_tried_again() -> None:
    """b crossed two of a's requests while its own one was still on the way: its values lack
    two jumps, one more than a request can be caught up past. a refuses it, exactly."""
    a, b = pair()
    theirs = b.initiate(0, now=101.0)  # delayed on the way to a
    first = a.initiate(0, now=101.1)
    assert theirs is not None
    assert first is not None
    a.receive(b.receive(first.frame, now=101.2) or b"", now=101.3)  # crossed: served at once
    second = a.initiate(0, now=101.4)
    assert second is not None
    a.receive(b.receive(second.frame, now=101.5) or b"", now=101.6)
    assert b.counters.crossed == 2
    busy = a.receive(theirs.frame, now=101.7)
    assert isinstance(decode(busy or b""), Busy)
    b.receive(busy or b"", now=101.8)
    start = b.next_start()
    assert start is not None
    (again,) = b.expire(now=start)
    a_reply = decode(a.receive(again.frame, now=start) or b"")
    assert isinstance(a_reply, Reply)
    b.receive(encode(a_reply), now=start)
    assert (a.activations(), b.activations()) == ({1: 3}, {0: 3})
    jumps = [(2.2, 0), (2.8, 0), (a_reply.t, 1)]
    expected = replay_pair(jumps, t_end=a_reply.t + 3.0)
    np.testing.assert_allclose(states_of(a, b, t=a_reply.t + 3.0), expected, rtol=0, atol=1e-14)


def test_a_request_waits_for_a_server_engaged_with_another_peer_whatever_the_ids() -> None:
    net = Net.build("line:3")  # edge 0 joins nodes 0 and 1, edge 1 nodes 1 and 2
    a, b, c = (net.nodes[v] for v in range(3))
    to_c = b.initiate(1, now=1.0)  # b engages with c, at T = 1.0
    to_b = a.initiate(0, now=1.1)  # a (id 0, lower than b's) asks b, at T = 1.1
    assert to_c is not None
    assert to_b is not None
    assert b.receive(to_b.frame, now=1.2, route=b"0") == DEFERRED  # waits: not refused
    assert (b.counters.deferred, b.counters.refused, b.next_deadline()) == (1, 0, 2.0)
    b.receive(c.receive(to_c.frame, now=1.3) or b"", now=1.4)  # b's exchange settles
    released = b.take_released()
    assert [route for route, _ in released] == [b"0"]
    reply = decode(released[0][1])
    assert isinstance(reply, Reply)
    assert reply.t == pytest.approx(1.1)  # a's own time: after b's jump at 1.0, not moved
    a.receive(released[0][1], now=1.5)
    assert (a.activations(), b.activations(), c.activations()) == ({1: 1}, {0: 1, 2: 1}, {1: 1})
    net.now = 2.0
    net.check_exact()


def test_an_unmovable_request_older_than_the_servers_exchange_is_refused_at_once() -> None:
    net = Net.build("line:3")
    b = net.nodes[1]
    assert b.initiate(1, now=1.0) is not None  # b engages with node 2 at T = 1.0

    def ask(seq: int, t: float) -> bytes | None:  # node 0's exchanged value: no z, no move
        request = Request(src=0, edge=0, seq=seq, ack=0, t=t, u=(0.5,), z=None)
        return b.receive(encode(request), now=1.2, route=b"0")

    assert isinstance(decode(ask(1, 0.9) or b""), Busy)  # would only be refused after waiting
    assert ask(2, 1.1) == DEFERRED
    assert (b.counters.refused, b.counters.deferred) == (1, 1)


def test_a_first_refusal_past_an_unmovable_requests_time_is_tried_again_at_once() -> None:
    """b jumped past a's T before a's request came; it cannot move a's g(x), so it refuses
    with its floor. a asks again at once at that floor (no pause); a second refusal pauses."""
    timebase = TimeBase(epoch=0.0, rate=1.0)
    edges = {0: [Link(0, 1, 0.5)], 1: [Link(0, 0, 0.5), Link(1, 2, 0.5)], 2: [Link(1, 1, 0.5)]}
    a, b, c = (
        Exchanger(
            v,
            links,
            Ledger([float(v)], [link.edge for link in links], eta=0.1),
            0.5,
            timebase,
            timeout=2.0,
            exchange_value=lambda x: x,  # no z: the request cannot move
        )
        for v, links in edges.items()
    )
    late = a.initiate(0, now=1.0, due=1.0)  # delayed on the way to b
    first = c.initiate(1, now=1.05, due=1.05)
    assert late is not None
    assert first is not None
    c.receive(b.receive(first.frame, now=1.1) or b"", now=1.1)  # b jumps at 1.05
    busy = decode(b.receive(late.frame, now=1.2) or b"")
    assert isinstance(busy, Busy)
    assert busy.t == pytest.approx(1.05)  # b's floor: its last jump
    a.receive(encode(busy), now=1.2)
    (again,) = a.take_outgoing()  # at once, without a pause
    retry = decode(again.frame)
    assert isinstance(retry, Request)
    assert (retry.seq, retry.t, a.counters.bounced) == (2, pytest.approx(1.05), 1)
    second = c.initiate(1, now=1.3, due=1.3)  # b jumps past the retry's T too
    assert second is not None
    c.receive(b.receive(second.frame, now=1.3) or b"", now=1.3)
    a.receive(b.receive(again.frame, now=1.4) or b"", now=1.4)
    assert (a.take_outgoing(), a.counters.bounced) == ([], 2)  # the second refusal pauses
    start = a.next_start()
    assert start is not None
    assert start > 1.4
    (last,) = a.expire(now=start)
    a.receive(b.receive(last.frame, now=start) or b"", now=start)
    assert (a.activations(), b.activations(), c.activations()) == ({1: 1}, {0: 1, 2: 2}, {1: 2})
    x = sum(float(node.ledger.state(5.0)[0][0]) for node in (a, b, c))
    assert x == pytest.approx(3.0)


def test_a_cycle_of_waits_is_broken_by_the_wait_limit() -> None:
    """Around a triangle each node asks the next while the next asks its own next: every
    request waits for a node that waits. The limit refuses them all; then all settle."""
    net = Net.build("cycle:3")  # edges 0: 0-1, 1: 0-2, 2: 1-2
    for node in net.nodes.values():
        node.wait_limit = 0.5  # before the retry timeout (1.0): only the limit can help
    net.now = 1.0
    for v, edge in ((0, 0), (1, 2), (2, 1)):  # 0 asks 1, 1 asks 2, 2 asks 0
        out = net.nodes[v].initiate(edge, net.now)
        assert out is not None
        net.wire.append(Frame(out.peer, out.frame, v))
    while net.wire:
        net.deliver(0)
    assert all(node.engaged for node in net.nodes.values())  # deadlocked, for now
    assert [node.counters.deferred for node in net.nodes.values()] == [1, 1, 1]
    assert all(node.next_deadline() == pytest.approx(1.5) for node in net.nodes.values())
    net.now = 1.5
    net.expire()  # each refuses the request waiting for it
    assert [node.counters.overdue for node in net.nodes.values()] == [1, 1, 1]
    assert [node.counters.refused for node in net.nodes.values()] == [1, 1, 1]
    # The refused try again after random pauses (about a millisecond, none measured): in
    # fine steps, with instant delivery, one of them goes first and the cycle does not form.
    rng = np.random.default_rng(0)
    for _ in range(2000):
        while net.wire:
            net.deliver(int(rng.integers(len(net.wire))))
        if not any(node.pending or node.waiting for node in net.nodes.values()):
            break
        net.now += 1e-4
        net.expire()
    assert sum(node.counters.served for node in net.nodes.values()) == 3  # all three, once
    assert not any(node.engaged or node.waiting for node in net.nodes.values())
    net.check_exact()


def test_a_request_older_than_the_servers_last_jump_is_refused() -> None:
    a, b = pair()
    out = a.initiate(0, now=101.5)  # T = 3.0
    assert out is not None
    a.receive(b.receive(out.frame, now=101.6) or b"", now=101.7)
    assert b.last_jump_time == pytest.approx(3.0)
    old = Request(src=0, edge=0, seq=9, ack=1, t=2.0, u=(1.0,))  # delayed: before b's jump
    busy = decode(b.receive(encode(old), now=101.8) or b"")
    assert isinstance(busy, Busy)
    assert busy.t == pytest.approx(3.0)  # try again at 3.0 or later
    assert (b.counters.served, b.counters.refused) == (1, 1)


def test_a_movable_request_older_than_the_servers_last_jump_is_served_at_that_jump() -> None:
    a, b = pair()
    out = a.initiate(0, now=101.5)  # T = 3.0
    assert out is not None
    a.receive(b.receive(out.frame, now=101.6) or b"", now=101.7)
    x_b, _ = b.ledger.state_values(3.0)
    # A request at 2.0 that lets b move it: b serves it at its own L = 3.0, with the
    # initiator's pair mixed from 2.0 to 3.0 in closed form (the initiator jumps nowhere
    # meanwhile: it is engaged).
    late = Request(src=0, edge=0, seq=2, ack=1, t=2.0, u=(0.8,), z=(0.1,))
    reply = decode(b.receive(encode(late), now=101.8) or b"")
    assert isinstance(reply, Reply)
    assert reply.t == 3.0
    u_a = mix_values([0.8], [0.1], b.eta, 1.0)[0]
    dx, dz = edge_flow_values(u_a, x_b, b.c, 0.5)
    assert reply.dx == pytest.approx(tuple(dx), rel=1e-15)
    assert reply.dz == pytest.approx(tuple(dz), rel=1e-15)
    assert (b.counters.served, b.counters.postponed, b.counters.refused) == (2, 1, 0)
    assert b.last_jump_time == 3.0


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
    assert reply.t == pytest.approx(2.0)  # the initiator's time: rate * (101 - 100)
    assert (a.first_exchange_wall, b.first_exchange_wall) == (None, 101.5)  # the server's
    a.receive(first or b"", now=101.6)
    a.receive(first or b"", now=101.7)  # a repeated reply is not applied again
    assert a.counters.duplicates == 1
    assert (a.first_exchange_wall, b.first_exchange_wall) == (101.6, 101.5)  # the first stays
    assert a.pending == 0
    x_a, _ = a.ledger.state(2.0)
    x_b, _ = b.ledger.state(2.0)
    assert float(x_a[0]) == pytest.approx(0.5)  # the average, at the exchange's time
    assert float(x_b[0]) == pytest.approx(0.5)
    assert a.rtt_ms()["p50"] == pytest.approx(600.0)
    assert a.activations() == {1: 1}
    assert b.activations() == {0: 1}


def test_a_closed_server_nacks_new_requests_and_the_initiator_abandons() -> None:
    a, b = pair()
    answered = a.initiate(0, now=101.0)
    assert answered is not None
    cached = b.receive(answered.frame, now=101.0)
    a.receive(cached or b"", now=101.05)
    refused = a.initiate(0, now=101.1)
    assert refused is not None
    b.close()
    before = b.ledger.state(4.0)
    nack = b.receive(refused.frame, now=101.2)
    assert isinstance(decode(nack or b""), Nack)
    np.testing.assert_array_equal(b.ledger.state(4.0), before)
    assert b.receive(refused.frame, now=101.3) == nack  # cached answers still given
    assert b.receive(answered.frame, now=101.3) is None  # settled (the new ack says so)
    a_before = a.ledger.state(4.0)
    a.receive(nack or b"", now=101.3)
    np.testing.assert_array_equal(a.ledger.state(4.0), a_before)
    assert a.counters.failed == 1
    assert (a.pending, a.engaged) == (0, False)
    b_initiated = b.initiate(0, now=101.4)
    assert b_initiated is None  # closed: no new exchanges
    assert a.initiate(0, now=101.5) is not None
    assert a.abandon_all() == 1


@pytest.mark.parametrize(
    "frame",
    [
        b"garbage",
        encode(Register(name="x", address="tcp://a:1", value=None, pid=1)),
        encode(Request(src=5, edge=0, seq=1, ack=0, t=2.0, u=(1.0,))),  # unknown peer
        encode(Request(src=0, edge=9, seq=1, ack=0, t=2.0, u=(1.0,))),  # unknown edge
        encode(Request(src=0, edge=0, seq=1, ack=0, t=2.0, u=(1.0, 2.0))),  # dim
        encode(Request(src=0, edge=0, seq=1, ack=0, t=1e9, u=(1.0,))),  # skew
        encode(Request(src=0, edge=0, seq=1, ack=0, t=-1e6, u=(1e308,))),  # overflow
        encode(Reply(src=0, edge=0, seq=7, t=2.0, dx=(1.0,), dz=(1.0,))),  # never sent
        encode(Busy(src=0, edge=0, seq=7, t=2.0)),  # never sent
        encode(Request(src=0, edge=0, seq=1, ack=0, t=2.0, u=(1.0,)))[:-3],  # cut
    ],
    ids=["garbage", "register", "peer", "edge", "dim", "skew", "overflow", "unsent", "busy", "cut"],
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
    net.drain(rng)
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
    for out in fresh.recovery.ledger_requests():
        assert isinstance(decode(out.frame), LedgerRequest)
        net.wire.append(Frame(out.peer, out.frame, 1))
    while net.wire:
        net.deliver(0)
    assert not fresh.recovering
    np.testing.assert_allclose(fresh.ledger.state(lost_t), lost, rtol=1e-12, atol=1e-15)
    assert fresh.last_jump_time >= old.last_jump_time  # after every jump it had made
    # Its values hold every jump its neighbours applied, although it has answered none of
    # their requests yet (served = 0): its first request is served as it is, not refused or
    # caught up past a jump it already has (gossip.exchange.crossing).
    first = fresh.initiate(links[1].edge, net.now)  # to node 2, which sent nothing since
    assert first is not None
    peer = net.nodes[links[1].peer]
    before = (peer.counters.refused, peer.counters.caught_up)
    answer = peer.receive(first.frame, net.now, b"1") or b""
    assert isinstance(decode(answer), Reply)
    assert (peer.counters.refused, peer.counters.caught_up) == before
    fresh.receive(answer, net.now)
    for _ in range(100):  # and it gossips on, exactly
        net.now += 0.3
        net.tick(int(rng.integers(3)), int(rng.integers(2)))
        while net.wire:
            net.deliver(0)
        net.expire()
    net.drain(rng)
    net.check_exact(counts=False)  # the restarted node counts from 0 again
