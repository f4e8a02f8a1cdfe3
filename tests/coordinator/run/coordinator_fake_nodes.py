"""Stand-in nodes that speak the coordinator's contracts (C2 registration, C3 MQTT reports).

They register over real ZeroMQ DEALER sockets and report over a real MQTT broker, while the
gossip itself is the exact continuized process run centrally with the core's functions
(:func:`gossip.model.jumps.jump`, :func:`gossip.model.mixing.mix`). This lets the coordinator's
tests run quickly without the node daemons; the cluster tests use the real ``gossip node``
processes.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import aiomqtt
import numpy as np
import zmq
import zmq.asyncio

from continuized.gossip.model.jumps import jump
from continuized.gossip.model.mixing import mix
from continuized.gossip.wire.schema import Bootstrap, Register, RegisterError, decode, encode


async def register(
    ctx: zmq.asyncio.Context, coordinator: str, name: str, port: int, value: float | None
) -> Bootstrap | RegisterError:
    """Register like a node: re-send every 0.5 s until an answer comes."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(coordinator)
    try:
        msg = Register(name, f"tcp://127.0.0.1:{port}", None if value is None else (value,), 1)
        while True:
            await sock.send(encode(msg))
            if await sock.poll(500):
                answer = decode(await sock.recv())
                assert isinstance(answer, Bootstrap | RegisterError)
                return answer
    finally:
        sock.close(0)


@dataclass
class FakeCluster:
    """Exact centralized ARG/RG over the bootstrapped graph, reported per node over MQTT.

    With ``trace_step`` every report also carries the node's exact values at the grid times
    ``k * trace_step`` passed since its last report, as a live node's trace (gossip.exchange.trace).
    """

    boots: list[Bootstrap]
    seed: int = 0
    period: float = 0.05
    trace_step: float | None = None
    periodic: bool = True  # False: the nodes send only their final reports (none seen running)
    edges: dict[int, tuple[int, int]] = field(default_factory=dict)
    stop_seen: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        for b in self.boots:
            for nb in b.neighbors:
                self.edges[nb.edge_index] = (min(b.node_id, nb.peer_id), max(b.node_id, nb.peer_id))
        self.probs = np.zeros(len(self.edges))
        for b in self.boots:
            for nb in b.neighbors:
                self.probs[nb.edge_index] = nb.prob
        n = len(self.boots)
        self.x = np.array([b.initial_value[0] for b in self.boots], dtype=np.float64)
        self.z = self.x.copy()
        self.t = 0.0
        self.counts = np.zeros((n, n), dtype=np.int64)
        self.grid: list[tuple[float, float]] = []  # (g, the true error there)
        self._traces: list[list[list[float]]] = [[] for _ in range(n)]
        self._next_g = 0.0

    def _sample(self, until: float) -> None:
        """Read the grid times up to ``until``: no jump comes between ``self.t`` and it."""
        if self.trace_step is None:
            return
        b0 = self.boots[0]
        mean = float(np.mean([b.initial_value[0] for b in self.boots]))
        while self._next_g <= until:
            g = self._next_g
            xs, _ = mix(self.x, self.z, b0.eta, g - self.t)
            self.grid.append((g, 0.5 * float(np.sum((xs - mean) ** 2))))
            for v, trace in enumerate(self._traces):
                trace.append([g, float(xs[v])])
            self._next_g += self.trace_step

    def advance(self, t_end: float, rng: np.random.Generator) -> None:
        """Run the exact process from ``self.t`` to ``t_end``."""
        b0 = self.boots[0]
        while True:
            dt = rng.exponential(1.0)
            if self.t + dt > t_end:
                self._sample(t_end)
                self.x, self.z = mix(self.x, self.z, b0.eta, t_end - self.t)
                self.t = t_end
                return
            self._sample(np.nextafter(self.t + dt, -np.inf))  # the grid times before the jump
            self.x, self.z = mix(self.x, self.z, b0.eta, dt)
            self.t += dt
            u, v = self.edges[int(rng.choice(len(self.probs), p=self.probs))]
            xu, zu, xv, zv = jump(self.x[u], self.z[u], self.x[v], self.z[v], b0.c)
            self.x[u], self.z[u], self.x[v], self.z[v] = xu, zu, xv, zv
            self.counts[u, v] += 1
            self.counts[v, u] += 1

    def report(self, node: int, final: bool) -> bytes:
        b = self.boots[node]
        trace, self._traces[node] = self._traces[node], []
        return json.dumps(
            {
                "node": node,
                "name": f"n{node}",
                "address": "tcp://127.0.0.1:1",
                "t": self.t,
                "wall": time.time(),
                "x": [float(self.x[node])],
                "z": [float(self.z[node])],
                "initial": list(b.initial_value),
                "final": final,
                "counters": {"initiated": 0, "served": 0},
                "rtt_ms": {"p50": 0.5, "p99": 2.0},
                "edges": {
                    str(nb.peer_id): int(self.counts[node, nb.peer_id]) for nb in b.neighbors
                },
                "trace": trace,
            }
        ).encode()

    async def run(self, host: str, port: int) -> None:
        """Gossip in real time (t = rate (now - epoch)), report, and stop on command."""
        b0 = self.boots[0]
        rng = np.random.default_rng(self.seed)
        prefix = f"gossip/{b0.cluster}"
        async with aiomqtt.Client(host, port) as client:
            await client.subscribe(f"{prefix}/control", qos=1)

            async def listen() -> None:
                async for message in client.messages:
                    if json.loads(message.payload).get("cmd") == "stop":
                        self.stop_seen.set()
                        return

            async with asyncio.TaskGroup() as tg:
                listener = tg.create_task(listen(), name="fake-listen")
                await asyncio.sleep(max(0.0, b0.epoch - time.time()))
                while not self.stop_seen.is_set():
                    self.advance(b0.rate * (time.time() - b0.epoch), rng)
                    for k in range(len(self.boots) if self.periodic else 0):
                        await client.publish(f"{prefix}/node/{k}/state", self.report(k, False))
                    await asyncio.sleep(self.period)
                # Stopped: no more jumps; everyone reports its final state at its own time.
                t_final = b0.rate * (time.time() - b0.epoch)
                self._sample(t_final)
                self.x, self.z = mix(self.x, self.z, b0.eta, t_final - self.t)
                self.t = t_final
                for k in range(len(self.boots)):
                    await client.publish(f"{prefix}/node/{k}/state", self.report(k, True), qos=1)
                listener.cancel()
