"""A whole topology of exchangers on an in-memory network that delays, reorders, drops and
repeats frames at random, and the sequential replay of the jumps it made (the oracle).

Every jump that happened is read off the wire as ``(T, order, edge)``: the server's Reply says
at which T it applied it, ``order`` is when (ties at one T are replayed in that order). The
replay runs them one after the other in T order with the core functions (closed-form mixing
and :func:`gossip.model.jumps.edge_flow`, as the simulator does) from the same initial values: the
continuized process for those jump times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from continuized.gossip.exchange.exchanger import DEFERRED, Exchanger
from continuized.gossip.exchange.trace import Trace
from continuized.gossip.exchange.vocabulary import Link, TimeBase
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import Topology, parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.jumps import edge_flow
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.model.mixing import mix
from continuized.gossip.wire.schema import Reply, decode

Value = Callable[[np.ndarray], np.ndarray]


@dataclass
class Frame:
    dest: int
    data: bytes
    route: int | None  # the sender of a request; None for answers


@dataclass
class ExactNet:
    topo: Topology
    nodes: dict[int, Exchanger]
    initial: np.ndarray
    c: float
    eta: float
    steps: np.ndarray  # per edge
    value: Value | None
    rng: np.random.Generator
    now: float = 0.0
    ticks: int = 0
    wire: list[Frame] = field(default_factory=list)
    jumps: list[tuple[float, int, int]] = field(default_factory=list)  # (T, order, edge)

    @classmethod
    def build(
        cls,
        spec: str,
        algorithm: str,
        seed: int,
        *,
        exclusive: bool = True,
        dim: int = 1,
        value: Value | None = None,
        steps: tuple[float, float] | None = None,  # per-edge steps drawn in this range
        scale: float = 1.0,
        timeout: float = 1e6,  # by default no retries: delivery is reliable, only late
        trace_step: float = 0.7,  # every node's exact samples (gossip.exchange.trace), on this grid
        wait_limit: float = 20.0,  # a request waits that long at most (a cycle of waits)
    ) -> ExactNet:
        topo = parse_topology(spec)
        q = graph_quantities(topo)
        params = gossip_params(algorithm, q.mu_gossip, q.r_max)
        rng = np.random.default_rng(seed)
        initial = scale * rng.normal(size=(topo.n, dim))
        edge_steps = (
            np.full(len(topo.edges), 0.5) if steps is None else rng.uniform(*steps, len(topo.edges))
        )
        nodes = {}
        for v in range(topo.n):
            links = [
                Link(e, peer, float(topo.probs[e]), float(edge_steps[e]))
                for e, peer in topo.incident(v)
            ]
            ledger = Ledger(initial[v], [link.edge for link in links], eta=params.eta)
            nodes[v] = Exchanger(
                v,
                links,
                ledger,
                params.c,
                TimeBase(epoch=0.0, rate=1.0),
                timeout=timeout,
                min_timeout=timeout,  # fixed: the virtual round trips vary a lot
                max_skew=1e5,  # frames wait many virtual seconds on this network
                max_timeout=max(timeout, 1.0) * 4.0,
                exchange_value=value,
                exclusive=exclusive,
                rng=seed * 1000 + v,
                backoff=1.0,
                trace=Trace(trace_step),
                wait_limit=wait_limit,
            )
        return cls(topo, nodes, initial, params.c, params.eta, edge_steps, value, rng)

    def tick(self) -> None:
        """A tick of a random edge, at a random end."""
        edge = int(self.rng.integers(len(self.topo.edges)))
        v = int(self.topo.edges[edge][int(self.rng.integers(2))])
        self.ticks += 1
        out = self.nodes[v].initiate(edge, self.now, due=self.now)
        if out is not None:
            self.wire.append(Frame(out.peer, out.frame, v))

    def deliver(self, drop: float = 0.0, dup: float = 0.0) -> None:
        frame = self.wire.pop(int(self.rng.integers(len(self.wire))))
        if self.rng.random() < drop:
            return
        if self.rng.random() < dup:
            self.wire.append(frame)
        node = self.nodes[frame.dest]
        route = None if frame.route is None else str(frame.route).encode()
        served = node.counters.served
        answer = node.receive(frame.data, self.now, route)
        if answer is not None and answer != DEFERRED and route is not None:
            self._answer(route, answer, node.counters.served > served)
        self._flush(frame.dest, node.take_outgoing())

    def _answer(self, route: bytes, answer: bytes, applied: bool) -> None:
        message = decode(answer)
        if isinstance(message, Reply) and applied:  # applied now: record the jump
            self.jumps.append((message.t, len(self.jumps), message.edge))
        self.wire.append(Frame(int(route), answer, None))

    def _flush(self, v: int, outs: list) -> None:  # type: ignore[type-arg]
        self.wire.extend(Frame(out.peer, out.frame, v) for out in outs)
        for route, answer in self.nodes[v].take_released():  # deferred requests, now decided
            assert route is not None
            self._answer(route, answer, isinstance(decode(answer), Reply))

    def expire(self) -> None:
        for v, node in self.nodes.items():
            self._flush(v, node.expire(self.now))

    def run(self, steps: int, tick_share: float, drop: float = 0.0, dup: float = 0.0) -> None:
        """``steps`` events at random times: a tick with probability ``tick_share``, else a
        delivery of a random frame in flight (so frames wait a random number of events)."""
        for _ in range(steps):
            self.now += float(self.rng.exponential(1.0))
            if not self.wire or self.rng.random() < tick_share:
                self.tick()
            else:
                self.deliver(drop, dup)
            self.expire()

    def quiesce(self, drop: float = 0.0, dup: float = 0.0) -> None:
        """Deliver everything, in random order, with retries and back-offs, until nothing is
        pending or owed anywhere."""
        for _ in range(1_000_000):
            if not self.wire:
                if not any(n.pending or n.waiting for n in self.nodes.values()):
                    return
                self.now += 5.0  # let pauses and timeouts pass
                self.expire()
                continue
            self.now += float(self.rng.exponential(1.0))
            self.deliver(drop, dup)
        raise AssertionError("the network did not settle")

    def _u(self, x: np.ndarray) -> np.ndarray:
        return x if self.value is None else np.asarray(self.value(x), dtype=np.float64)

    def replay(self, t_end: float) -> tuple[np.ndarray, np.ndarray]:
        """The jumps one after the other in time order."""
        x = self.initial.copy()
        z = self.initial.copy()
        t = 0.0
        for when, _, edge in sorted(self.jumps):
            x, z = mix(x, z, self.eta, when - t)
            t = when
            self._jump(x, z, edge)
        return mix(x, z, self.eta, t_end - t)

    def _jump(self, x: np.ndarray, z: np.ndarray, edge: int) -> None:
        """Apply the jump of ``edge`` to the network's (x, z), in place."""
        v, w = (int(k) for k in self.topo.edges[edge])
        flow = edge_flow(self._u(x[v]), self._u(x[w]), self.c, float(self.steps[edge]))
        x[v] += flow.dx
        z[v] += flow.dz
        x[w] -= flow.dx
        z[w] -= flow.dz

    def replay_at(self, grid: np.ndarray) -> np.ndarray:
        """Every node's x at each time of ``grid`` (increasing) in the replay: shape
        (len(grid), n, dim), with the jumps at times ``<= g`` applied."""
        x = self.initial.copy()
        z = self.initial.copy()
        t = 0.0
        out = []
        jumps = sorted(self.jumps)
        i = 0
        for g in grid:
            while i < len(jumps) and jumps[i][0] <= g:
                when, _, edge = jumps[i]
                x, z = mix(x, z, self.eta, when - t)
                t = when
                self._jump(x, z, edge)
                i += 1
            xg, _ = mix(x, z, self.eta, g - t)
            out.append(xg)
        return np.array(out)

    def trace_gap(self) -> tuple[float, int]:
        """Return the largest gap between the nodes' trace samples and the replay at the same
        grid times, and how many samples there were."""
        samples = {v: node.trace.take() for v, node in self.nodes.items() if node.trace}
        grid = np.unique([row[0] for rows in samples.values() for row in rows])
        index = {g: k for k, g in enumerate(grid.tolist())}
        replayed = self.replay_at(grid)
        gap, count = 0.0, 0
        for v, rows in samples.items():
            for row in rows:
                gap = max(gap, float(np.abs(replayed[index[row[0]], v] - row[1:]).max()))
                count += 1
        return gap, count

    def states(self, t_end: float) -> tuple[np.ndarray, np.ndarray]:
        pairs = [self.nodes[v].ledger.state(t_end) for v in range(self.topo.n)]
        return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])

    def gap(self) -> tuple[float, float]:
        """Return the largest gap between the nodes and the replay, and the replay's largest
        distance to its mean (what is left to converge, so that schedules differ)."""
        t_end = self.now + 1.0
        x, z = self.states(t_end)
        rx, rz = self.replay(t_end)
        gap = float(max(np.abs(x - rx).max(), np.abs(z - rz).max()))
        return gap, float(np.abs(rx - rx.mean(axis=0)).max())

    def total(self, name: str) -> int:
        return sum(int(getattr(n.counters, name)) for n in self.nodes.values())
