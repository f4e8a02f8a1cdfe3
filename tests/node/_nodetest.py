"""Helpers for node tests: bootstraps for a whole topology, and the error of final reports."""

from __future__ import annotations

from typing import Any

import numpy as np

from gossip.mixing import mix
from gossip.params import gossip_params
from gossip.spectral import graph_quantities
from gossip.topology import parse_topology
from gossip.wire import Bootstrap, Neighbor


def bootstraps(
    spec: str,
    algorithm: str,
    rate: float,
    epoch: float,
    values: np.ndarray,
    addresses: list[str],
    broker: str = "",
    metrics_period: float = 0.5,
) -> list[Bootstrap]:
    """What a coordinator would send each node of ``spec``."""
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    p = gossip_params(algorithm, q.mu_gossip, q.r_max)
    values = values.reshape(topo.n, -1)
    return [
        Bootstrap(
            node_id=v,
            cluster="test",
            algorithm=algorithm,
            eta=p.eta,
            c=p.c,
            theta=p.theta,
            epoch=epoch,
            rate=rate,
            neighbors=tuple(
                Neighbor(peer, addresses[peer], e, float(topo.probs[e]))
                for e, peer in topo.incident(v)
            ),
            initial_value=tuple(values[v].tolist()),
            broker=broker,
            metrics_period=metrics_period,
            dim=values.shape[1],
        )
        for v in range(topo.n)
    ]


def common_time(reports: list[dict[str, Any]], eta: float) -> tuple[float, np.ndarray]:
    """Mix every report's x to the latest report's t; return (t, x of shape (n, dim))."""
    t = max(r["t"] for r in reports)
    xs = []
    for r in sorted(reports, key=lambda r: r["node"]):
        x, _ = mix(np.array(r["x"]), np.array(r["z"]), eta, t - r["t"])
        xs.append(x)
    return t, np.array(xs)
