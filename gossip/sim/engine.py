"""The sweep: exact event-driven simulation of one block of independent runs.

Theory of operation
-------------------
State of a block of R runs on n nodes: ``x`` and ``z`` of shape ``(R * (n + 1),) + value_shape``
(one extra, dummy node per run for idle activations, see :mod:`gossip.sim.events`) and ``last``,
the time at which each node's pair was last brought up to date. Between activations a node's pair
only mixes, and mixing is exact over any interval, so a node is brought up to date *on demand*:

* at an activation of {v, w} at time T, only v and w are mixed from their ``last`` to T
  (:func:`gossip.model.mixing.mix`), the jump is applied (:func:`gossip.model.jumps.edge_flow` seen
  from each end, ``edge_flow(x_v, x_w)`` into v and ``edge_flow(x_w, x_v)``, its exact negative,
  into w, added by :func:`gossip.model.jumps.apply_flow`), and ``last`` of both becomes T. That is
  O(1) work per activation, whatever n is. Plain gossip (``eta = c = 0``) skips ``z`` and the
  mixing;
* at a grid time g, every run has passed g (lock-step rows), so every node of every run is mixed
  to g in one vectorised call, only to measure ``sum_v 1/2 |x_v(g) - mean|^2``; the state itself
  is left as it is.

Row k of a chunk holds one activation per run, so a step is a handful of numpy operations over
the R runs of the block: fancy-index gathers, the core's ``mix`` and ``edge_flow``, and scatters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.model.jumps import apply_flow, edge_flow
from continuized.gossip.model.mixing import mix
from continuized.gossip.sim.events import EdgeSampler, chunk_bounds, draw_chunk, run_generator

__all__ = ["BlockSpec", "run_block"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class BlockSpec:
    """Everything one block needs; plain arrays, so it pickles cheaply to a worker process.

    ``grid`` is the sweep grid (the requested t grid, refined so that no interval exceeds
    ``CHUNK_T``) and ``record[i]`` says whether the error is measured at ``grid[i]``.
    """

    n: int
    edges: NDArray[np.int64]
    probs: FloatArray
    initial: FloatArray
    eta: float
    c: float
    grid: FloatArray
    record: NDArray[np.bool_]
    seed: int
    first_run: int
    n_runs: int


def run_block(spec: BlockSpec, report: Callable[[int], None] | None = None) -> FloatArray:
    """Simulate runs ``first_run .. first_run + n_runs - 1`` and return their errors.

    Parameters
    ----------
    spec : BlockSpec
        The problem and the block of runs.
    report : callable, optional
        Called with the number of activations simulated after each chunk.

    Returns
    -------
    ndarray (n_runs, record.sum())
        ``sum_v 1/2 |x_v(t) - mean|^2`` at every recorded grid time.
    """
    n, n_runs = spec.n, spec.n_runs
    value_shape = spec.initial.shape[1:]
    tau_shape = (-1,) + (1,) * len(value_shape)
    width = n + 1
    mean = spec.initial.mean(axis=0)
    # Mixing is the identity and z never feeds back into x when eta = c = 0 (plain gossip).
    tracks_z = spec.eta != 0.0 or spec.c != 0.0

    start = np.zeros((n_runs, width, *value_shape), dtype=np.float64)
    start[:, :n] = spec.initial
    x = start.reshape((n_runs * width, *value_shape))
    z = x.copy()
    last = np.zeros(n_runs * width, dtype=np.float64)

    base = np.arange(n_runs, dtype=np.int64) * width
    end_u = np.append(spec.edges[:, 0], n)
    end_v = np.append(spec.edges[:, 1], n)
    sampler = EdgeSampler.from_probs(spec.probs)
    gens = [run_generator(spec.seed, spec.first_run + r) for r in range(n_runs)]
    errors = np.empty((n_runs, int(spec.record.sum())), dtype=np.float64)
    col = 0
    eta, c = spec.eta, spec.c
    # Row k lists the u ends of the R activations, then their v ends: entry j's peer is j +- R.
    peer = np.concatenate((np.arange(n_runs, 2 * n_runs), np.arange(n_runs)))

    for i0, i1, window_start in chunk_bounds(spec.grid):
        chunk = draw_chunk(gens, window_start, spec.grid[i0:i1], sampler)
        both = np.concatenate((base + end_u[chunk.edges], base + end_v[chunk.edges]), axis=1)
        times2 = np.concatenate((chunk.times, chunk.times), axis=1)
        row = 0
        for i, stop in zip(range(i0, i1), chunk.row_stops.tolist(), strict=True):
            for k in range(row, stop):
                nodes = both[k]
                if tracks_z:
                    tau = (times2[k] - last[nodes]).reshape(tau_shape)
                    xs, zs = mix(x[nodes], z[nodes], eta, tau)
                    # Each end takes the flow of the edge as seen from itself; the two are exact
                    # negatives of each other, so no sign bookkeeping is needed.
                    xs, zs = apply_flow(xs, zs, edge_flow(xs, xs[peer], c))
                    x[nodes] = xs
                    z[nodes] = zs
                    last[nodes] = times2[k]
                else:
                    xs = x[nodes]
                    x[nodes] = xs + edge_flow(xs, xs[peer], c).dx
            row = stop
            if spec.record[i]:
                errors[:, col] = _error(
                    x, z, last, float(spec.grid[i]), eta, tracks_z, mean, n_runs, width, n
                )
                col += 1
        if report is not None:
            report(chunk.events)
    return errors


def _error(
    x: FloatArray,
    z: FloatArray,
    last: FloatArray,
    t: float,
    eta: float,
    tracks_z: bool,
    mean: FloatArray,
    n_runs: int,
    width: int,
    n: int,
) -> FloatArray:
    """Return ``sum_v 1/2 |x_v(t) - mean|^2`` per run, every node mixed to t on the fly."""
    value_shape = x.shape[1:]
    xs = x.reshape((n_runs, width, *value_shape))[:, :n]
    if tracks_z:
        zs = z.reshape((n_runs, width, *value_shape))[:, :n]
        tau = (t - last.reshape(n_runs, width)[:, :n]).reshape(
            (n_runs, n) + (1,) * len(value_shape)
        )
        xs, _ = mix(xs, zs, eta, tau)
    gap = xs - mean
    return np.asarray(0.5 * (gap * gap).reshape(n_runs, -1).sum(axis=1), dtype=np.float64)
