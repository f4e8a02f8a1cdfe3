"""Exact mode: with corrections, the asynchronous protocol equals a sequential replay of its jumps.

The oracle: exchangers joined by a fake network that delays and reorders every frame at
random, with many exchanges overlapping. Every jump that happened is read off the wire as
(edge, T) (the server's Reply says when it applied it). Replaying them one after the other in
T order with the core functions (closed-form mixing and ``jump``, as the simulator does) from
the same initial values gives the continuized process for those jump times; at quiescence
every node's ``(x, z)`` must equal it. Without corrections the same schedule must be far off,
so the test can fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from gossip.exchange import Exchanger, Link, TimeBase
from gossip.jumps import jump
from gossip.ledger import Ledger
from gossip.mixing import mix
from gossip.params import gossip_params
from gossip.spectral import graph_quantities
from gossip.topology import Topology, parse_topology
from gossip.wire import Correction, CorrectionAck, Reply, decode, encode


@dataclass
class Frame:
    dest: int
    data: bytes
    route: int | None  # the sender of a request or correction; None for answers


@dataclass
class ExactNet:
    """A whole topology of exchangers and a network that delivers frames in random order."""

    topo: Topology
    nodes: dict[int, Exchanger]
    initial: np.ndarray
    c: float
    eta: float
    rng: np.random.Generator
    now: float = 0.0
    wire: list[Frame] = field(default_factory=list)
    jumps: dict[tuple[int, int, int], float] = field(default_factory=dict)  # id -> T

    @classmethod
    def build(
        cls,
        spec: str,
        algorithm: str,
        exact: bool,
        seed: int,
        dim: int = 1,
        timeout: float = 1e6,  # by default no retries: delivery is reliable, only late
        horizon: float | None = None,
    ) -> ExactNet:
        topo = parse_topology(spec)
        q = graph_quantities(topo)
        params = gossip_params(algorithm, q.mu_gossip, q.r_max)
        rng = np.random.default_rng(seed)
        initial = rng.normal(size=(topo.n, dim))
        nodes = {}
        for v in range(topo.n):
            links = [Link(e, peer, float(topo.probs[e])) for e, peer in topo.incident(v)]
            ledger = Ledger(initial[v], [link.edge for link in links], eta=params.eta)
            nodes[v] = Exchanger(
                v,
                links,
                ledger,
                params.c,
                TimeBase(epoch=0.0, rate=1.0),
                timeout=timeout,
                max_timeout=max(timeout, 1.0) * 4.0,
                exact=exact,
                horizon=horizon,
            )
        return cls(topo, nodes, initial, params.c, params.eta, rng)

    def _flush(self, v: int) -> None:
        for out in self.nodes[v].take_outgoing():
            self.wire.append(Frame(out.peer, out.frame, v))

    def tick(self) -> None:
        v = int(self.rng.integers(self.topo.n))
        links = self.nodes[v].links
        link = links[int(self.rng.integers(len(links)))]
        out = self.nodes[v].initiate(link.edge, self.now)
        if out is not None:  # None: the edge is stuck (retried a lot), the tick is skipped
            self.wire.append(Frame(out.peer, out.frame, v))

    def deliver(self, drop: float = 0.0, dup: float = 0.0) -> None:
        frame = self.wire.pop(int(self.rng.integers(len(self.wire))))
        if self.rng.random() < drop:
            return
        if self.rng.random() < dup:
            self.wire.append(frame)
        answer = self.nodes[frame.dest].receive(frame.data, self.now)
        if answer is not None and frame.route is not None:
            message = decode(answer)
            if isinstance(message, Reply):
                self.jumps[(message.edge, frame.route, message.seq)] = message.t
            self.wire.append(Frame(frame.route, answer, None))
        self._flush(frame.dest)

    def run(self, steps: int, tick_share: float) -> None:
        """``steps`` events at random times: a tick with probability ``tick_share``, else a
        delivery of a random frame in flight (so frames wait a random number of events)."""
        for _ in range(steps):
            self.now += float(self.rng.exponential(1.0))
            if not self.wire or self.rng.random() < tick_share:
                self.tick()
            else:
                self.deliver()

    def expire(self) -> None:
        for v, node in self.nodes.items():
            self.wire.extend(Frame(out.peer, out.frame, v) for out in node.expire(self.now))

    def quiesce(self) -> None:
        for _ in range(1_000_000):
            if not self.wire:
                self.now += 100.0  # let every timeout pass: retries, if anything is pending
                self.expire()
                if not self.wire:
                    break
            self.now += float(self.rng.exponential(1.0))
            self.deliver()
        assert not self.wire
        assert all(not n.pending and not n.pending_corrections for n in self.nodes.values())

    def replay(self, t_end: float) -> tuple[np.ndarray, np.ndarray]:
        """The jumps one after the other in time order (ties as the nodes break them)."""
        x = self.initial.copy()
        z = self.initial.copy()
        t = 0.0
        order = sorted(self.jumps.items(), key=lambda kv: (kv[1], kv[0][0], kv[0][2], kv[0][1]))
        for (edge, _, _), when in order:
            x, z = mix(x, z, self.eta, when - t)
            t = when
            u, w = (int(i) for i in self.topo.edges[edge])
            x[u], z[u], x[w], z[w] = jump(x[u], z[u], x[w], z[w], self.c)
        return mix(x, z, self.eta, t_end - t)

    def states(self, t_end: float) -> tuple[np.ndarray, np.ndarray]:
        pairs = [self.nodes[v].ledger.state(t_end) for v in range(self.topo.n)]
        return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def deviation(spec: str, algorithm: str, exact: bool, seed: int) -> tuple[float, float, ExactNet]:
    """Run a random schedule to quiescence; return the largest gap to the replay, the replay's
    largest distance to the mean (what is left to converge), and the network."""
    net = ExactNet.build(spec, algorithm, exact, seed)
    net.run(steps=1500, tick_share=0.3)  # about 450 jumps, frames waiting ~2 events per hop
    net.quiesce()
    t_end = net.now + 1.0
    x, z = net.states(t_end)
    rx, rz = net.replay(t_end)
    gap = float(max(np.abs(x - rx).max(), np.abs(z - rz).max()))
    return gap, float(np.abs(rx - rx.mean(axis=0)).max()), net


GRAPHS = ["line:12", "grid:4x4"]


@pytest.mark.parametrize("spec", GRAPHS)
@pytest.mark.parametrize("algorithm", ["arg", "rg"])
@pytest.mark.parametrize("seed", [0, 1])
def test_with_corrections_the_nodes_equal_the_sequential_replay(
    spec: str, algorithm: str, seed: int
) -> None:
    gap, spread, net = deviation(spec, algorithm, exact=True, seed=seed)
    assert len(net.jumps) > 350
    assert sum(n.counters.corrected for n in net.nodes.values()) > 100  # overlaps happened
    assert spread > 1e-6  # not converged yet: the replay still tells schedules apart
    assert gap < 1e-9 * max(1.0, spread)


@pytest.mark.parametrize("spec", GRAPHS)
@pytest.mark.parametrize("algorithm", ["arg", "rg"])
def test_without_corrections_the_same_schedules_are_far_from_the_replay(
    spec: str, algorithm: str
) -> None:
    gap, spread, net = deviation(spec, algorithm, exact=False, seed=0)
    assert len(net.jumps) > 350
    assert gap > 0.1 * spread


@pytest.mark.parametrize("spec", GRAPHS)
@pytest.mark.parametrize("horizon", [1e9, 60.0], ids=["long-horizon", "short-horizon"])
def test_drops_duplicates_and_retries_keep_mass_and_exactness(spec: str, horizon: float) -> None:
    """Frames (requests, replies, corrections, acks) are lost and repeated; retries re-send the
    same frames, repeats are answered from the caches: the sums always hold, and the replay
    too when no flow comes later than the horizon (with a short one, some do: those are
    applied without correcting the final jumps, so only the sums are exact)."""
    net = ExactNet.build(spec, "arg", exact=True, seed=0, timeout=30.0, horizon=horizon)
    for _ in range(1500):
        net.now += float(net.rng.exponential(1.0))
        if not net.wire or net.rng.random() < 0.3:
            net.tick()
        else:
            net.deliver(drop=0.1, dup=0.1)
        net.expire()
    net.quiesce()
    counters = [n.counters for n in net.nodes.values()]
    assert sum(c.retried for c in counters) > 10
    assert sum(c.duplicates for c in counters) > 10
    assert sum(c.corrections for c in counters) > 50
    assert sum(c.failed for c in counters) == 0
    t_end = net.now + 1.0
    x, z = net.states(t_end)
    rx, rz = net.replay(t_end)
    # Rounding is relative to the values, which grow here (ticks are thinned by the faults).
    scale = float(np.abs(net.initial).sum() + np.abs(x).sum() + np.abs(z).sum())
    np.testing.assert_allclose(x.sum(axis=0), net.initial.sum(axis=0), rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(z.sum(axis=0), net.initial.sum(axis=0), rtol=0, atol=1e-12 * scale)
    late = sum(c.late for c in counters)
    spread = float(np.abs(rx - rx.mean(axis=0)).max())
    gap = max(np.abs(x - rx).max(), np.abs(z - rz).max())
    if horizon > 1e6:
        assert late == 0
        assert gap < 1e-9 * max(1.0, spread)
    else:
        assert late > 0


def test_bad_corrections_are_rejected_and_change_nothing() -> None:
    net = ExactNet.build("line:3", "arg", exact=True, seed=0)
    one = net.nodes[1]
    edge = next(link.edge for link in one.links if link.peer == 0)
    before = one.ledger.state_values(5.0)

    def correction(**fields: object) -> bytes:
        base: dict[str, object] = {
            "src": 0,
            "edge": edge,
            "seq": 1,
            "ack": 0,
            "jumps": (2 * 1 + 1,),  # exchange 1, started by the sender: never happened
            "t": (1.0,),
            "d": (0.5,),
        }
        base.update(fields)
        return encode(Correction(**base))  # type: ignore[arg-type]

    bad = [
        correction(),  # no such exchange
        correction(jumps=(2 * 1 + 0,)),  # "ours", but we never started one
        correction(src=2),  # not the neighbour on that edge
        correction(jumps=(3, 3), t=(1.0, 1.0), d=(0.5, 0.5, 0.5, 0.5)),  # dim 2, cluster dim 1
        correction(t=(1e12,)),  # far in the future
    ]
    for frame in bad:
        assert one.receive(frame, 2.0) is None
    assert one.counters.rejected == len(bad)
    assert one.ledger.state_values(5.0) == before
    assert one.take_outgoing() == []
    # A well-formed one for an exchange that did happen is applied once, and acknowledged.
    out = net.nodes[0].initiate(edge, 1.0)
    assert out is not None
    assert isinstance(decode(one.receive(out.frame, 1.5) or b""), Reply)
    good = correction(seq=2, ack=1)  # the sender's seq 1 was the request
    assert isinstance(decode(one.receive(good, 2.0) or b""), CorrectionAck)
    assert one.receive(good, 2.1) == one.receive(good, 2.2)  # repeats: from the cache
    assert one.counters.duplicates == 2
