"""The sweep: exact event-driven simulation of one block of runs of a decentralized optimizer.

Theory of operation
-------------------
The activations are those of the gossip simulator for the same seed: run r draws its Poisson
clocks window by window from ``run_generator(seed, r)`` with :func:`gossip.sim.events.draw_chunk`,
and a block of runs is swept in lock step, row k of a chunk holding one activation per run,
padded with idle activations on a dummy edge that joins a dummy node (index n) to itself. So for
the same seed a run sees exactly the activations the gossip simulator's run sees.

State of a block of R runs: ``y`` (and ``z`` for acd; ``x`` for dgd) of shape ``(R (n + 1), d)``
and ``last``, the time each node was last brought up to date. An activation of {v, w} touches
only v and w (O(1) work, whatever n is):

* acd: mix both ends from ``last`` to T (:func:`gossip.model.mixing.mix`, rate ``eta``), compute
  ``g = grad f^*(y)`` at both ends (``ProblemSet.grad_conjugate``, batched over the R runs), add
  :func:`gossip.model.jumps.edge_flow` seen from each end (exact negatives of each other);
* cd: the same with no mixing and no z;
* dgd: both ends average, then each steps along its own gradient at the average.

The dummy node's flow is exactly zero for the dual methods (both of its ends hold the same
value); its value is never recorded. At a recorded grid time every run has passed it, so every
node of every run is mixed to it (without changing the state) and measured: the primal
estimates ``x_v`` (``grad f_v^*(y_v)``, or of ``z_v`` with ``estimate="z"``; ``x_v`` itself for
dgd) give ``sum_v |x_v - x*|^2``, the consensus distance ``sum_v |x_v - mean_v x_v|^2`` and the
objective gap ``f(mean_v x_v) - f(x*)``.
"""

from __future__ import annotations

import inspect as inspect_module
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.dual.params import DualAlgorithm, DualParams
from continuized.gossip.dual.steps import dgd_average, dgd_step
from continuized.gossip.model.jumps import edge_flow
from continuized.gossip.model.mixing import mix
from continuized.gossip.sim.events import EdgeSampler, chunk_bounds, draw_chunk, run_generator

__all__ = [
    "BatchProblems",
    "BlockCurves",
    "DualBlockSpec",
    "Inspector",
    "estimates",
    "run_dual_block",
]

FloatArray = NDArray[np.float64]


class BatchProblems(Protocol):
    """What the simulator needs of a network's problems (``gossip.problems.ProblemSet`` has it)."""

    @property
    def n(self) -> int:
        """Number of nodes."""
        ...

    @property
    def dim(self) -> int:
        """Dimension d of x."""
        ...

    @property
    def mu(self) -> float:
        """Strong convexity of every f_v (the smallest over nodes)."""
        ...

    @property
    def L(self) -> float:  # noqa: N802 (the paper's name)
        """Smoothness of every f_v (the largest over nodes)."""
        ...

    def grad_conjugate(self, nodes: NDArray[np.intp], y: FloatArray) -> FloatArray:
        """Row i: ``grad f_{nodes[i]}^*(y[i])``; ``y`` of shape (k, d)."""
        ...

    def grad(self, nodes: NDArray[np.intp], x: FloatArray) -> FloatArray:
        """Row i: ``grad f_{nodes[i]}(x[i])``; ``x`` of shape (k, d)."""
        ...

    def value(self, x: FloatArray) -> float:
        """``sum_v f_v(x)`` for one x of shape (d,)."""
        ...

    def values(self, x: FloatArray) -> FloatArray:
        """``sum_v f_v`` at each row of x (shape (k, d)): shape (k,)."""
        ...

    def local(self, v: int) -> Any:
        """Node v's problem (``value``, ``grad``, ``grad_conjugate``)."""
        ...

    def x_star(self) -> FloatArray:
        """The minimiser of ``sum_v f_v``, computed centrally."""
        ...


@dataclass(frozen=True, eq=False)
class DualBlockSpec:
    """Everything one block needs; it pickles to a worker process with its problem set.

    ``grid`` is the sweep grid (the requested grid plus the window ends) and ``record[i]`` says
    whether ``grid[i]`` is measured. ``runs`` lists the run indices of the block (run r draws
    from ``run_generator(seed, r)``; an index may repeat). ``alphas``, for dgd only, gives each
    run of the block its own step (``params.alpha`` otherwise): the step search sweeps all its
    candidates in one block.
    """

    edges: NDArray[np.int64]
    probs: FloatArray
    problems: BatchProblems
    params: DualParams
    x_star: FloatArray
    f_star: float
    grid: FloatArray
    record: NDArray[np.bool_]
    seed: int
    runs: NDArray[np.int64]
    estimate: str = "y"
    alphas: FloatArray | None = None

    @property
    def n_runs(self) -> int:
        """Number of runs in the block."""
        return len(self.runs)


@dataclass(frozen=True, eq=False)
class BlockCurves:
    """The measurements of a block, each of shape ``(runs, recorded points)``."""

    errors: FloatArray
    gaps: FloatArray
    consensus: FloatArray


Inspector = Callable[[float, FloatArray, FloatArray], None]
"""Called at each recorded time t with the state mixed to t: ``y`` and ``z``, each (runs, n, d)."""


def run_dual_block(
    spec: DualBlockSpec,
    report: Callable[[int], None] | None = None,
    inspect: Inspector | None = None,
) -> BlockCurves:
    """Simulate the runs ``spec.runs`` and return their curves.

    ``report`` is called with the number of activations simulated after each chunk;
    ``inspect`` (for tests) at each recorded time with the whole state mixed to that time
    (``z`` is ``y`` for cd, and both are ``x`` for dgd).
    """
    problems, p = spec.problems, spec.params
    n, d, n_runs = problems.n, problems.dim, spec.n_runs
    width = n + 1
    algo = p.algorithm
    state = np.zeros((n_runs * width, d), dtype=np.float64)
    if algo is DualAlgorithm.DGD:
        # Start where the dual methods start: x_v = grad f_v^*(0), the local minimiser.
        local = problems.grad_conjugate(np.arange(n, dtype=np.intp), np.zeros((n, d)))
        state.reshape(n_runs, width, d)[:, :n] = local
    z = np.zeros_like(state) if algo is DualAlgorithm.ACD else state
    # Each slot's latest primal estimate: the warm start of its next Newton solve (logistic),
    # far closer than the node's latest answer in another run.
    guess = _start_guesses(problems, n_runs) if _takes_x0(problems) else None
    last = np.zeros(n_runs * width, dtype=np.float64)
    # The dummy node n borrows node 0's problem: its two ends hold the same value, so its flow
    # is exactly zero, and its own value is never measured.
    node_of = np.tile(np.append(np.arange(n, dtype=np.intp), 0), n_runs)
    base = np.arange(n_runs, dtype=np.int64) * width
    end_u = np.append(spec.edges[:, 0], n)
    end_v = np.append(spec.edges[:, 1], n)
    steps = np.append(p.steps if p.steps.size else np.zeros(len(spec.edges)), 0.0)
    sampler = EdgeSampler.from_probs(spec.probs)
    gens = [run_generator(spec.seed, int(r)) for r in spec.runs]
    # One step per entry of a row (u ends of the R runs, then their v ends).
    alpha = p.alpha if spec.alphas is None else np.tile(spec.alphas, 2)[:, None]
    recorded = int(spec.record.sum())
    curves = BlockCurves(*(np.empty((n_runs, recorded)) for _ in range(3)))
    # Row k lists the u ends of the R activations, then their v ends: entry j's peer is j +- R.
    peer = np.concatenate((np.arange(n_runs, 2 * n_runs), np.arange(n_runs)))
    col = 0
    for i0, i1, window_start in chunk_bounds(spec.grid):
        chunk = draw_chunk(gens, window_start, spec.grid[i0:i1], sampler)
        both = np.concatenate((base + end_u[chunk.edges], base + end_v[chunk.edges]), axis=1)
        times2 = np.concatenate((chunk.times, chunk.times), axis=1)
        step2 = np.concatenate((steps[chunk.edges], steps[chunk.edges]), axis=1)[..., None]
        ids2 = node_of[both]
        row = 0
        for i, stop in zip(range(i0, i1), chunk.row_stops.tolist(), strict=True):
            for k in range(row, stop):
                _activate(
                    algo,
                    p,
                    problems,
                    state,
                    z,
                    last,
                    both[k],
                    ids2[k],
                    times2[k],
                    step2[k],
                    peer,
                    alpha,
                    guess,
                )
            row = stop
            if spec.record[i]:
                _measure(spec, state, z, last, float(spec.grid[i]), curves, col, inspect, guess)
                col += 1
        if report is not None:
            report(chunk.events)
    return curves


def _activate(
    algo: DualAlgorithm,
    p: DualParams,
    problems: BatchProblems,
    state: FloatArray,
    z: FloatArray,
    last: FloatArray,
    nodes: NDArray[np.int64],
    ids: NDArray[np.intp],
    times: FloatArray,
    step: FloatArray,
    peer: NDArray[np.int64],
    alpha: float | FloatArray,
    guess: FloatArray | None,
) -> None:
    """Apply one row of activations (one per run) in place."""
    if algo is DualAlgorithm.DGD:
        mid = dgd_average(state[nodes], state[nodes[peer]])
        state[nodes] = dgd_step(mid, problems.grad(ids, mid), alpha)
        return
    ys = state[nodes]
    if algo is DualAlgorithm.ACD:
        ys, zs = mix(ys, z[nodes], p.eta, (times - last[nodes])[:, None])
    g = _conjugate(problems, ids, ys, None if guess is None else guess[nodes])
    if guess is not None:
        guess[nodes] = g
    flow = edge_flow(g, g[peer], c=p.gamma_prime, step=step)
    state[nodes] = ys + flow.dx
    if algo is DualAlgorithm.ACD:
        z[nodes] = zs + flow.dz
        last[nodes] = times


def estimates(
    spec: DualBlockSpec,
    state: FloatArray,
    z: FloatArray,
    last: FloatArray,
    t: float,
    inspect: Inspector | None = None,
    guess: FloatArray | None = None,
) -> FloatArray:
    """Return every run's primal estimates at time t, shape ``(runs, n, d)``; state unchanged."""
    problems, p = spec.problems, spec.params
    n, d, n_runs = problems.n, problems.dim, spec.n_runs
    ys = state.reshape(n_runs, n + 1, d)[:, :n]
    zs = z.reshape(n_runs, n + 1, d)[:, :n]
    if p.algorithm is DualAlgorithm.ACD:
        tau = (t - last.reshape(n_runs, n + 1)[:, :n])[..., None]
        ys, zs = mix(ys, zs, p.eta, tau)
    if inspect is not None:
        inspect(t, ys, zs)
    if p.algorithm is DualAlgorithm.DGD:
        return np.asarray(ys.copy())
    if spec.estimate == "z" and p.algorithm is DualAlgorithm.ACD:
        ys = zs
    ids = np.tile(np.arange(n, dtype=np.intp), n_runs)
    start = None if guess is None else guess.reshape(n_runs, n + 1, d)[:, :n].reshape(-1, d)
    g = _conjugate(problems, ids, np.ascontiguousarray(ys).reshape(n_runs * n, d), start)
    return np.asarray(g, dtype=np.float64).reshape(n_runs, n, d)


def _measure(
    spec: DualBlockSpec,
    state: FloatArray,
    z: FloatArray,
    last: FloatArray,
    t: float,
    curves: BlockCurves,
    col: int,
    inspect: Inspector | None,
    guess: FloatArray | None,
) -> None:
    x = estimates(spec, state, z, last, t, inspect, guess)
    err = x - spec.x_star
    curves.errors[:, col] = np.einsum("rnd,rnd->r", err, err)
    mean = x.mean(axis=1)
    spread = x - mean[:, None, :]
    curves.consensus[:, col] = np.einsum("rnd,rnd->r", spread, spread)
    curves.gaps[:, col] = spec.problems.values(mean) - spec.f_star


def _takes_x0(problems: BatchProblems) -> bool:
    """Whether ``grad_conjugate`` takes a warm start ``x0`` (iterative solvers do)."""
    try:
        return "x0" in inspect_module.signature(problems.grad_conjugate).parameters
    except (TypeError, ValueError):
        return False


def _start_guesses(problems: BatchProblems, n_runs: int) -> FloatArray:
    """Every slot's first guess: its node's local minimiser ``grad f_v^*(0)`` (dummy: node 0's)."""
    n, d = problems.n, problems.dim
    local = problems.grad_conjugate(np.arange(n, dtype=np.intp), np.zeros((n, d)))
    return np.tile(np.concatenate((local, local[:1])), (n_runs, 1))


def _conjugate(
    problems: BatchProblems, ids: NDArray[np.intp], y: FloatArray, x0: FloatArray | None
) -> FloatArray:
    if x0 is None:
        return problems.grad_conjugate(ids, y)
    solve: Callable[..., FloatArray] = problems.grad_conjugate
    return solve(ids, y, x0=x0)
