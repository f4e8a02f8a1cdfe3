"""How far the coordinator's running estimate sits from the true error, on the model itself.

Run with ``python benchmarks/bench_estimate_bias.py`` (about half a minute). It runs the
continuized process (ARG, onehot) event by event, exactly, keeping every node's state at each
of its jumps, and then measures the network as the coordinator does while a cluster runs: every
node reports every ``period`` units of t at its own phase, and the latest reports are mixed to
the median of their times (:func:`coordinator.figures.metrics.estimate`, which misses the jumps
between the reports' times; the coordinator's consistent cut is left out). It prints, per report
period, the median and 90th percentile over evaluation times and runs of
``log10(estimate / true error)`` at the estimate's own time: what the exact curve of
:mod:`gossip.exchange.trace` removes.

A report period in t is ``rate * metrics_period``: 100 t at 1000/s with 0.1 s reports.
"""

from __future__ import annotations

import argparse
import bisect
from collections.abc import Sequence

import numpy as np

from continuized.coordinator.figures.metrics import estimate
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.jumps import edge_flow
from continuized.gossip.model.mixing import mix

Record = list[tuple[float, float, float]]  # one node's (t, x, z) after each of its jumps


def _run(spec: str, t_end: float, seed: int) -> tuple[list[Record], float]:
    """One exact run: per node, its (t, x, z) after each of its jumps (and at 0)."""
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    p = gossip_params("arg", q.mu_gossip, q.r_max)
    rng = np.random.default_rng(seed)
    n = topo.n
    x = np.zeros(n)
    x[0] = 1.0
    z = x.copy()
    history = [[(0.0, float(x[v]), float(z[v]))] for v in range(n)]
    probs = np.asarray(topo.probs) / np.sum(topo.probs)
    t = 0.0
    while t < t_end:
        dt = float(rng.exponential(1.0))
        edge = int(rng.choice(len(probs), p=probs))
        x, z = mix(x, z, p.eta, dt)
        t += dt
        v, w = (int(k) for k in topo.edges[edge])
        flow = edge_flow(x[v : v + 1], x[w : w + 1], p.c, 0.5)
        x[v] += flow.dx[0]
        z[v] += flow.dz[0]
        x[w] -= flow.dx[0]
        z[w] -= flow.dz[0]
        history[v].append((t, float(x[v]), float(z[v])))
        history[w].append((t, float(x[w]), float(z[w])))
    return history, p.eta


def _at(record: Record, s: float) -> tuple[float, float, float]:
    """A node's last recorded (t, x, z) at or before s."""
    k = bisect.bisect_right([r[0] for r in record], s) - 1
    return record[k]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="line:30")
    parser.add_argument(
        "--periods", default="25,100,200,400,800", help="report periods, in units of t"
    )
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--t-end", type=float, default=3500.0)
    args = parser.parse_args(argv)
    periods = [float(p) for p in args.periods.split(",")]
    runs = [_run(args.graph, args.t_end, seed) for seed in range(args.runs)]
    n = len(runs[0][0])
    initial = np.zeros((n, 1))
    initial[0] = 1.0
    grid = np.arange(500.0, args.t_end - 100.0, 100.0)
    print(f"{args.graph}, ARG onehot, {args.runs} exact runs to t = {args.t_end:g}")
    for period in periods:
        offsets: list[float] = []
        for seed, (history, eta) in enumerate(runs):
            rng = np.random.default_rng(1000 + seed)
            phases = rng.uniform(0.0, period, size=n)
            for g in grid:
                # Each node's latest report: its state at its own last report time.
                times = np.floor((g - phases) / period) * period + phases
                reports = [_at(history[v], s) for v, s in enumerate(times)]
                rx, rz = mix(
                    np.array([[r[1]] for r in reports]),
                    np.array([[r[2]] for r in reports]),
                    eta,
                    np.array([[s - r[0]] for r, s in zip(reports, times, strict=True)]),
                )
                # The coordinator labels the reports with their median time (metrics.estimate).
                est = estimate(times, rx, rz, initial, eta, at=float(np.median(times)))
                x = _exact_at(history, eta, est.t)
                exact = estimate(np.full(n, est.t), x, x, initial, 0.0, at=est.t)
                offsets.append(float(np.log10(est.error / exact.error)))
        print(
            f"  report period {period:5.0f} t: log10(estimate / true error) median "
            f"{np.median(offsets):+.2f} decades, p90 {np.quantile(offsets, 0.9):+.2f}"
        )


def _exact_at(history: list[Record], eta: float, t: float) -> np.ndarray:
    """Every node's true x at t: its state after its last jump before t, mixed to t."""
    rows = [_at(h, t) for h in history]
    x, _ = mix(
        np.array([[r[1]] for r in rows]),
        np.array([[r[2]] for r in rows]),
        eta,
        np.array([[t - r[0]] for r in rows]),
    )
    return np.asarray(x)


if __name__ == "__main__":
    main()
