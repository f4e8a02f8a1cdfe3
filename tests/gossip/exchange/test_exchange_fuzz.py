"""Fuzzing the exchange state machine: two honest exchangers joined in memory, and a hostile
network that replays, reorders and forges frames.

Nothing but the documented outcomes comes out of ``receive`` (an answer, ``None`` or
:data:`DEFERRED`; never an exception), a forged frame is counted as rejected and changes no
state, the two ledgers stay exact opposites once everything settles (replays are never applied
twice), and every cache and queue stays under its stated bound through floods of 10^4+ frames.
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from continuized.gossip.exchange.exchanger import DEFERRED, Exchanger
from continuized.gossip.exchange.vocabulary import SEQ_WINDOW, Link, TimeBase
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.wire.schema import (
    MAX_INT,
    Busy,
    LedgerReply,
    LedgerRequest,
    Nack,
    Reply,
    Request,
    decode,
    encode,
)

EPOCH, RATE, SKEW = 100.0, 2.0, 60.0
EDGE = 0


def make_pair(exclusive: bool = True) -> tuple[Exchanger, Exchanger]:
    """Nodes 0 and 1 on edge 0, with ARG-like coupling (c > 0) so both variables move."""
    timebase = TimeBase(epoch=EPOCH, rate=RATE)
    a, b = (
        Exchanger(
            v,
            [Link(EDGE, 1 - v, 1.0)],
            Ledger([3.0 - 2.0 * v, v - 0.5], [EDGE], eta=0.1),
            0.5,
            timebase,
            timeout=0.05,
            max_timeout=0.4,
            max_skew=SKEW,
            exclusive=exclusive,
            rng=v,
        )
        for v in (0, 1)
    )
    return a, b


def check_bounds(node: Exchanger) -> None:
    """The stated bounds of every structure a peer's frames can make grow."""
    edges = len(node.links)
    for state in node._state.edges.values():
        assert len(state.cache) <= SEQ_WINDOW  # answers numbered in (ack, ack + SEQ_WINDOW]
        assert all(s > state.ack_seen for s in state.cache)
    assert len(node._server.deferred) <= SEQ_WINDOW * edges  # same window, per edge
    assert not node._server._released  # the harness drains it after every call
    # With the lock, one exchange is engaged; a released, stuck one blocks its edge, so at
    # most one is pending per edge. (Without it, ticks are local: max_in_flight bounds them.)
    if node.exclusive:
        assert node.pending <= edges
    # Every live deadline has one entry; settled ones are dropped when they come due.
    assert len(node._initiator._deadlines) <= node.counters.initiated + node.counters.retried


def snapshot(node: Exchanger) -> tuple[Any, ...]:
    """Everything a forged frame must leave alone (all but the rejected count)."""
    counters = node.counters.as_dict()
    del counters["rejected"]
    x, z = node.ledger.state_values(1000.0)
    edges = [
        (s.next_seq, s.ack_seen, s.max_seen, dict(s.cache), sorted(s.pending), s.stuck)
        for s in node._state.edges.values()
    ]
    return (
        x,
        z,
        counters,
        edges,
        node._server.deferred.waiters(),
        node.engaged,
        node.waiting,
        node.last_jump_time,
    )


def raw(**fields: Any) -> bytes:
    """A frame packed without the wire module's help (values it would never encode)."""
    return msgpack.packb({"v": 2, **fields}, use_bin_type=True)


# --- forgeries: each one must be rejected whatever state the target is in ----------------------


def forgeries(target: int, now: float, dim: int) -> st.SearchStrategy[bytes]:
    """Frames to node ``target`` that fail validation or the protocol's rules."""
    peer = 1 - target
    t_now = RATE * (now - EPOCH)
    ahead = t_now + RATE * SKEW * 2
    u = tuple(float(i) for i in range(dim))
    seqs = st.integers(1, MAX_INT)
    sane_t = st.floats(t_now - 1.0, t_now + 1.0)
    wrong_src = st.sampled_from([target, 2, 7, MAX_INT])
    wrong_edge = st.sampled_from([1, 9, MAX_INT])
    hostile_num = st.sampled_from([math.nan, math.inf, -math.inf])
    hostile_int = st.sampled_from([-1, -(2**63), MAX_INT + 1, 2**64 - 1, True, 1.0, "1", None])
    return st.one_of(
        # Not from the neighbour at the other end of the named edge.
        st.builds(
            lambda src, s, t: encode(Request(src=src, edge=EDGE, seq=s, ack=s - 1, t=t, u=u)),
            wrong_src,
            seqs,
            sane_t,
        ),
        st.builds(
            lambda e, s, t: encode(Request(src=peer, edge=e, seq=s, ack=s - 1, t=t, u=u)),
            wrong_edge,
            seqs,
            sane_t,
        ),
        st.builds(
            lambda src, s, t: encode(Reply(src=src, edge=EDGE, seq=s, t=t, dx=u, dz=u)),
            wrong_src,
            seqs,
            sane_t,
        ),
        st.builds(
            lambda src, s, t: encode(Busy(src=src, edge=EDGE, seq=s, t=t)), wrong_src, seqs, sane_t
        ),
        st.builds(
            lambda src, s: encode(Nack(src=src, edge=EDGE, seq=s, reason="x")), wrong_src, seqs
        ),
        st.builds(lambda e: encode(LedgerRequest(src=peer, edge=e)), wrong_edge),
        st.builds(
            lambda src, t: encode(LedgerReply(src=src, edge=EDGE, seq=1, t=t, fx=u, fz=u)),
            wrong_src,
            sane_t,
        ),
        # From the right peer, but impossible: wrong dimension, absurd numbering or time.
        st.builds(
            lambda s, n: encode(
                Request(src=peer, edge=EDGE, seq=s, ack=s - 1, t=t_now, u=(1.0,) * n)
            ),
            seqs,
            st.sampled_from([1, dim + 1, 1000]).filter(lambda n: n != dim),
        ),
        st.builds(  # ack at or after seq, or seq beyond the window
            lambda s, gap: encode(
                Request(src=peer, edge=EDGE, seq=s, ack=min(max(s - gap, 0), MAX_INT), t=t_now, u=u)
            ),
            st.integers(2**62, MAX_INT),
            st.sampled_from([0, -1, -(2**40), SEQ_WINDOW + 1, 2**62]),
        ),
        st.builds(  # a time far ahead (its flow would be mixed back by exp(+2 eta tau))
            lambda s, dt: encode(Request(src=peer, edge=EDGE, seq=s, ack=s - 1, t=ahead + dt, u=u)),
            seqs,
            st.sampled_from([0.0, 1e6, 1e300]),
        ),
        st.builds(
            lambda s, dt: encode(Busy(src=peer, edge=EDGE, seq=s, t=ahead + dt)),
            seqs,
            st.sampled_from([0.0, 1e300]),
        ),
        st.builds(  # answers to exchanges never started (numbered past ours)
            lambda s, t: encode(Reply(src=peer, edge=EDGE, seq=s, t=t, dx=u, dz=u)),
            st.integers(10**6, MAX_INT),
            sane_t,
        ),
        st.builds(
            lambda s: encode(Nack(src=peer, edge=EDGE, seq=s, reason="x")),
            st.integers(10**6, MAX_INT),
        ),
        # Not even valid frames: NaN and inf times, integers out of range, wrong types.
        st.builds(
            lambda t: raw(type="request", src=peer, edge=EDGE, seq=1, ack=0, t=t, u=list(u)),
            hostile_num,
        ),
        st.builds(
            lambda t: raw(type="request", src=peer, edge=EDGE, seq=1, ack=0, t=t_now, u=[t] * dim),
            hostile_num,
        ),
        st.builds(
            lambda name, bad: raw(
                **{
                    "type": "request",
                    "src": peer,
                    "edge": EDGE,
                    "seq": 1,
                    "ack": 0,
                    "t": t_now,
                    "u": list(u),
                    name: bad,
                }
            ),
            st.sampled_from(["src", "edge", "seq", "ack"]),
            hostile_int,
        ),
        st.builds(
            lambda name, bad: raw(
                **{
                    "type": "reply",
                    "src": peer,
                    "edge": EDGE,
                    "seq": 1,
                    "t": t_now,
                    "dx": list(u),
                    "dz": list(u),
                    name: bad,
                }
            ),
            st.sampled_from(["seq", "dx", "dz"]),
            hostile_int | hostile_num,
        ),
        st.builds(
            lambda bad: raw(
                type="reply", src=peer, edge=EDGE, seq=1, t=bad, dx=list(u), dz=list(u)
            ),
            hostile_num | st.sampled_from([True, None, "1", [1.0]]),
        ),
        st.binary(max_size=64),
    )


# --- the state machine --------------------------------------------------------------------------


class HostileNetwork(RuleBasedStateMachine):
    """Two honest nodes; the network delivers in any order, replays anything it has carried,
    and injects forgeries. Time only moves forward."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: tuple[Exchanger, Exchanger] = make_pair()
        self.now = EPOCH + 1.0
        self.wire: list[tuple[int, bytes, bytes | None]] = []  # (dest, frame, route)
        self.history: list[tuple[int, bytes, bytes | None]] = []

    @initialize(exclusive=st.booleans())
    def build(self, exclusive: bool) -> None:
        self.nodes = make_pair(exclusive)

    def send(self, dest: int, frame: bytes, route: bytes | None) -> None:
        self.wire.append((dest, frame, route))
        self.history.append((dest, frame, route))

    def collect(self, v: int) -> None:
        node = self.nodes[v]
        for out in node.take_outgoing():
            self.send(out.peer, out.frame, bytes([v]))
        for route, answer in node.take_released():
            assert route is not None
            self.send(route[0], answer, None)

    def receive(self, dest: int, frame: bytes, route: bytes | None) -> bytes | None:
        answer = self.nodes[dest].receive(frame, self.now, route)  # must never raise
        assert answer is None or isinstance(answer, bytes)
        if answer is not None and answer != DEFERRED:
            assert route is not None  # only requests are answered
            decode(answer)  # what we send is valid
            self.send(route[0], answer, None)
        self.collect(dest)
        return answer

    @rule(v=st.integers(0, 1), dt=st.floats(0.0, 0.3))
    def tick(self, v: int, dt: float) -> None:
        self.now += dt
        out = self.nodes[v].initiate(EDGE, self.now)
        if out is not None:
            self.send(out.peer, out.frame, bytes([v]))
        self.collect(v)

    @precondition(lambda self: self.wire)
    @rule(data=st.data())
    def deliver_any(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.wire) - 1), label="which")
        self.receive(*self.wire.pop(i))

    @precondition(lambda self: self.history)
    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        dest, frame, route = data.draw(st.sampled_from(self.history), label="replayed")
        self.receive(dest, frame, route)

    @rule(dt=st.floats(0.0, 1.0))
    def expire(self, dt: float) -> None:
        self.now += dt
        for v, node in enumerate(self.nodes):
            for out in node.expire(self.now):
                self.send(out.peer, out.frame, bytes([v]))
            self.collect(v)

    @rule(data=st.data(), v=st.integers(0, 1))
    def forge(self, data: st.DataObject, v: int) -> None:
        node = self.nodes[v]
        frame = data.draw(forgeries(v, self.now, node.ledger.dim), label="forged")
        before, rejected = snapshot(node), node.counters.rejected
        assert node.receive(frame, self.now, bytes([2])) is None
        assert node.counters.rejected == rejected + 1
        assert snapshot(node) == before
        assert not node.take_outgoing()
        assert not node.take_released()

    @invariant()
    def bounded(self) -> None:
        for node in self.nodes:
            check_bounds(node)

    def teardown(self) -> None:
        """Deliver everything, let every retry run out, then the two ledgers must be exact
        opposites: each exchange applied at both ends or at neither, replays never twice."""
        for _ in range(10_000):
            if self.wire:
                self.receive(*self.wire.pop(0))
            elif any(node.pending for node in self.nodes):
                self.expire(1.0)
            else:
                break
        assert not self.wire
        assert not any(node.pending for node in self.nodes)
        a, b = self.nodes
        t = RATE * (self.now - EPOCH) + 1.0
        fa, fb = a.ledger.edge_total(EDGE, t), b.ledger.edge_total(EDGE, t)
        np.testing.assert_allclose(fa.dx, -fb.dx, rtol=0, atol=1e-12)
        np.testing.assert_allclose(fa.dz, -fb.dz, rtol=0, atol=1e-12)
        assert a.activations()[1] == b.activations()[0]
        (xa, _za), (xb, _zb) = a.ledger.state(t), b.ledger.state(t)
        x0 = a.ledger.initial + b.ledger.initial
        np.testing.assert_allclose(xa + xb, x0, rtol=0, atol=1e-12)  # mass is exact


HostileNetwork.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestHostileNetwork = HostileNetwork.TestCase


# --- floods -------------------------------------------------------------------------------------

FLOOD = 12_000


def engaged_server() -> tuple[Exchanger, Exchanger]:
    """Node 0 engaged in its own exchange with node 1 (its request never delivered): node 1's
    requests wait for it (higher id), node 1 is refused by nobody."""
    a, b = make_pair()
    assert a.initiate(EDGE, EPOCH + 1.0) is not None
    assert a.engaged
    return a, b


def request(seq: int, ack: int, t: float, dim: int = 2) -> bytes:
    return encode(Request(src=1, edge=EDGE, seq=seq, ack=ack, t=t, u=(0.25,) * dim))


@pytest.mark.parametrize("engaged", [False, True], ids=["free", "engaged"])
def test_a_flood_of_fresh_requests_keeps_the_cache_and_deferred_bounded(engaged: bool) -> None:
    a = engaged_server()[0] if engaged else make_pair()[0]
    rng = np.random.default_rng(0)
    now, ack = EPOCH + 1.0, 0
    released = 0
    for i in range(FLOOD):
        # A peer that never acks, then jumps its watermark ahead: fresh numbers all the time.
        if rng.random() < 0.01:
            ack += int(rng.integers(1, SEQ_WINDOW))
        seq = ack + int(rng.integers(1, 2 * SEQ_WINDOW))
        now += 1e-4
        answer = a.receive(request(seq, ack, RATE * (now - EPOCH)), now, b"\x01")
        assert answer is None or isinstance(answer, bytes)
        released += len(a.take_released())
        if i % 16 == 0:  # the bounds check walks the cache: not on every frame
            check_bounds(a)
    check_bounds(a)
    assert a.counters.rejected > 0  # those beyond the window
    if engaged:
        assert a.counters.deferred > SEQ_WINDOW  # more deferred over time than ever held
        assert 0 < len(a._server.deferred) <= SEQ_WINDOW
        assert released == 0  # still engaged: nothing answered
    else:
        assert a.counters.served > SEQ_WINDOW  # more answers over time than ever cached
        assert 0 < len(a._state.edges[EDGE].cache) <= SEQ_WINDOW


def test_a_flood_of_replays_and_forgeries_changes_nothing_and_grows_nothing() -> None:
    a, b = make_pair()
    now = EPOCH + 1.0
    frames = []
    # A few honest exchanges both ways, every frame kept for replay.
    for k in range(20):
        now += 0.01
        v = k % 2
        out = (a, b)[v].initiate(EDGE, now)
        assert out is not None
        answer = (a, b)[out.peer].receive(out.frame, now, bytes([v]))
        assert answer is not None
        assert answer != DEFERRED
        assert (a, b)[v].receive(answer, now) is None
        frames += [(out.peer, out.frame), (v, answer)]
    states = [snapshot(node) for node in (a, b)]
    rng = np.random.default_rng(1)
    forged = [
        encode(Request(src=7, edge=EDGE, seq=1, ack=0, t=1.0, u=(1.0, 1.0))),
        encode(Request(src=1, edge=EDGE, seq=2**62, ack=0, t=1.0, u=(1.0, 1.0))),
        encode(Busy(src=1, edge=EDGE, seq=1, t=1e300)),
        encode(Reply(src=1, edge=EDGE, seq=MAX_INT, t=1.0, dx=(1.0, 1.0), dz=(1.0, 1.0))),
        raw(type="request", src=1, edge=EDGE, seq=1, ack=0, t=math.nan, u=[1.0, 1.0]),
        raw(type="busy", src=1, edge=EDGE, seq=-1, t=1.0),
    ]
    for _ in range(FLOOD):
        now += 1e-4
        if rng.random() < 0.5:
            dest, frame = frames[int(rng.integers(len(frames)))]
            (a, b)[dest].receive(frame, now, bytes([1 - dest]))
        else:
            before = a.counters.rejected
            a.receive(forged[int(rng.integers(len(forged)))], now, b"\x01")
            assert a.counters.rejected == before + 1
        for node in (a, b):
            assert not node.take_outgoing()
            assert not node.take_released()
            check_bounds(node)
    # Replayed requests were answered from the cache or ignored, replayed answers counted as
    # duplicates: the ledgers, numbering and caches are those before the flood.
    for node, before in zip((a, b), states, strict=True):
        after = snapshot(node)
        assert after[:2] == before[:2]
        assert after[3:] == before[3:]
        assert node.counters.duplicates > 0


def test_a_flood_of_ledger_requests_and_stale_answers_grows_nothing() -> None:
    a, _b = make_pair()
    now = EPOCH + 1.0
    for k in range(FLOOD):
        now += 1e-4
        answer = a.receive(encode(LedgerRequest(src=1, edge=EDGE)), now)
        assert answer is not None
        assert isinstance(decode(answer), LedgerReply)
        a.receive(encode(Nack(src=1, edge=EDGE, seq=0, reason="x")), now)  # long settled
        a.receive(
            encode(LedgerReply(src=1, edge=EDGE, seq=k, t=1.0, fx=(1.0, 1.0), fz=(1.0, 1.0))), now
        )  # not recovering: a duplicate
        check_bounds(a)
    assert a.counters.served == 0
    assert a.pending == 0
    assert a.ledger.state_values(5.0) == make_pair()[0].ledger.state_values(5.0)


def test_an_initiator_without_the_lock_never_numbers_beyond_the_window() -> None:
    # Requests lost, none answered: the initiator's watermark stays at 0 while it keeps
    # starting. It must stop at the window the server enforces, not send what it would reject.
    a, b = make_pair(exclusive=False)
    now = EPOCH + 1.0
    sent = []
    for _ in range(SEQ_WINDOW + 50):
        now += 1e-4
        out = a.initiate(EDGE, now)
        if out is not None:
            sent.append(out.frame)
    assert len(sent) == SEQ_WINDOW
    assert a.counters.skipped == 50
    for frame in sent[-3:]:
        assert b.receive(frame, now, b"\x00") not in (None, DEFERRED)
    assert b.counters.rejected == 0
    check_bounds(a)
    check_bounds(b)
