"""A synthetic cluster: the gossip process run in-process, reported as real nodes report it.

It lets the dashboard be looked at, tested and benchmarked without starting node processes:
:class:`SyntheticCluster` runs the continuized process exactly (Poisson activations, the core's
``jump`` and ``mix``), and produces what the coordinator would see, either written straight
into a :class:`~coordinator.figures.state.ClusterState` (:meth:`SyntheticCluster.feed`) or as the
contract-C3 JSON report of each node (:meth:`SyntheticCluster.report`) for a publisher that
sends them over MQTT. Counters and round trips are made up but plausible.

Try it: ``python -m continuized.coordinator.dashboard.synthetic --graph grid:15x15 --port 8080``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import time
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.coordinator.figures.records import ErrorPoint, NodeView
from continuized.coordinator.figures.state import BrokerStatus, ClusterState
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.jumps import jump
from continuized.gossip.model.mixing import mix

__all__ = ["SyntheticCluster", "main"]


class SyntheticCluster:
    """The exact gossip process on ``graph``, advanced on demand, with node-like reports.

    Parameters
    ----------
    graph : str
        Topology spec.
    algorithm : str
        ``arg`` or ``rg``.
    rate : float
        Activations per second: ``t = rate * (wall - epoch)``.
    seed : int
        Seed of the activations.
    run_id : str
        Run identifier written into the state.
    eps : float
        Target error.
    """

    def __init__(
        self,
        graph: str = "grid:5x5",
        algorithm: str = "arg",
        rate: float = 200.0,
        seed: int = 0,
        run_id: str = "synthetic",
        eps: float = 1e-6,
    ) -> None:
        self.topology = parse_topology(graph)
        self.quantities = graph_quantities(self.topology)
        self.params = gossip_params(algorithm, self.quantities.mu_gossip, self.quantities.r_max)
        self.rate = rate
        self.run_id = run_id
        self.eps = eps
        n = self.topology.n
        self.rng = np.random.default_rng(seed)
        self.initial: NDArray[np.float64] = np.zeros(n)
        self.initial[0] = 1.0  # onehot, as in the paper's figure
        self.x = self.initial.copy()
        self.z = self.initial.copy()
        self.t = 0.0
        self.epoch = time.time()
        self.counts = np.zeros(self.topology.n_edges, dtype=np.int64)
        self.initiated = np.zeros(n, dtype=np.int64)
        self.served = np.zeros(n, dtype=np.int64)
        self.reports = np.zeros(n, dtype=np.int64)
        self.silent: set[int] = set()  # nodes whose reports are lost (to show stale nodes)
        self._cum = np.cumsum(self.topology.probs)

    def advance(self, t_end: float) -> None:
        """Run the process from its current t to ``t_end``: activations, jumps and mixing."""
        eta, c = self.params.eta, self.params.c
        edges = self.topology.edges
        while True:
            gap = float(self.rng.exponential(1.0))
            if self.t + gap > t_end:
                break
            # Mixing is the same linear flow at every node: all of them can move together.
            self.x, self.z = mix(self.x, self.z, eta, gap)
            self.t += gap
            k = min(int(np.searchsorted(self._cum, self.rng.random())), len(edges) - 1)
            v, w = int(edges[k, 0]), int(edges[k, 1])
            xv, zv, xw, zw = jump(self.x[v], self.z[v], self.x[w], self.z[w], c)
            self.x[v], self.z[v], self.x[w], self.z[w] = float(xv), float(zv), float(xw), float(zw)
            self.counts[k] += 1
            self.initiated[v] += 1
            self.served[w] += 1
        self.x, self.z = mix(self.x, self.z, eta, t_end - self.t)
        self.t = t_end

    def error(self) -> float:
        """``sum_v 1/2 (x_v(t) - mean)^2`` at the current t."""
        return float(0.5 * np.sum((self.x - self.initial.mean()) ** 2))

    def report(self, node: int, wall: float) -> dict[str, Any]:
        """Return node ``node``'s state report (contract C3) as of the current t."""
        self.reports[node] += 1
        edges = {str(peer): int(self.counts[k]) for k, peer in self.topology.incident(node)}
        return {
            "node": node,
            "name": f"synthetic-{node}",
            "address": f"tcp://127.0.0.1:{40000 + node}",
            "t": self.t,
            "wall": wall,
            "x": [float(self.x[node])],
            "z": [float(self.z[node])],
            "initial": [float(self.initial[node])],
            "final": False,
            "counters": {
                "initiated": int(self.initiated[node]),
                "served": int(self.served[node]),
                "retried": int(self.initiated[node]) // 500,
                "failed": 0,
                "rejected": 0,
                "duplicates": 0,
            },
            "rtt_ms": {"p50": 0.4 + 0.01 * (node % 7), "p99": 2.0 + 0.1 * (node % 5)},
            "lag": {"p50": 0.2 + 0.01 * (node % 3), "p99": 1.5 + 0.1 * (node % 4)},
            "edges": edges,
        }

    def new_state(self) -> ClusterState:
        """Return a :class:`ClusterState` for this cluster, as after the bootstrap."""
        n = self.topology.n
        return ClusterState(
            graph=self.topology.spec,
            expected=n,
            eps=self.eps,
            rate=self.rate,
            run_id=self.run_id,
            topology=self.topology,
            quantities=self.quantities,
            params=self.params,
            epoch=self.epoch,
            phase="running",
            registered={f"synthetic-{v}": v for v in range(n)},
            initial=[(float(v),) for v in self.initial],
            broker=BrokerStatus(url="mqtt://127.0.0.1:1883", kind="mosquitto", connected=True),
        )

    def feed(self, state: ClusterState, wall: float | None = None) -> None:
        """Advance to the t of ``wall`` and write every node's report and a history point."""
        wall = time.time() if wall is None else wall
        self.advance(max(self.t, self.rate * (wall - self.epoch)))
        for node in range(self.topology.n):
            if node in self.silent:
                continue
            payload = self.report(node, wall)
            view = state.nodes.get(node) or NodeView(node=node)
            state.nodes[node] = view
            view.name, view.address = payload["name"], payload["address"]
            view.t, view.wall = self.t, wall
            view.x, view.z = (float(self.x[node]),), (float(self.z[node]),)
            view.initial = (float(self.initial[node]),)
            view.counters = dict(payload["counters"])
            view.rtt_p50_ms = payload["rtt_ms"]["p50"]
            view.rtt_p99_ms = payload["rtt_ms"]["p99"]
            view.lag_p50, view.lag_p99 = payload["lag"]["p50"], payload["lag"]["p99"]
            view.edges = {int(k): v for k, v in payload["edges"].items()}
            view.received = wall
            view.reports += 1
        drift = abs(float(self.x.sum() - self.initial.sum())) / float(np.abs(self.initial).sum())
        state.record(ErrorPoint(self.t, self.error(), drift, wall))


async def _demo(graph: str, algorithm: str, rate: float, host: str, port: int) -> None:
    from continuized.coordinator.dashboard import serve

    cluster = SyntheticCluster(graph, algorithm, rate)
    state = cluster.new_state()

    async def run_cluster() -> None:
        while not state.reached:
            cluster.feed(state)
            await asyncio.sleep(0.1)
        state.set_phase("done", "synthetic run reached eps")

    async with asyncio.TaskGroup() as tg:
        tg.create_task(serve(state, host, port, on_ready=print), name="dashboard")
        tg.create_task(run_cluster(), name="synthetic-cluster")


def main(argv: list[str] | None = None) -> None:
    """Serve the dashboard of a synthetic cluster until Ctrl-C."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="grid:15x15")
    parser.add_argument("--algorithm", default="arg")
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    if not math.isfinite(args.rate) or args.rate <= 0:
        parser.error(f"--rate must be a positive number, got {args.rate}")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_demo(args.graph, args.algorithm, args.rate, args.host, args.port))


if __name__ == "__main__":
    main()
