"""The optimization sweep compiled with numba: runs one after another, one activation per turn.

Theory of operation
-------------------
This is the process of :mod:`gossip.dual.engine`, for acd, cd and dgd, written as a scalar loop that
numba compiles (:func:`gossip.dual.kernel.sweep_dual_runs`, ``njit(cache=True, nogil=True)``):

* the activations are the gossip simulator's for the same seed, drawn in the kernel from the
  run's own stream by :func:`gossip.sim.kernel.draw_window` (PCG64 bit for bit NumPy's,
  :mod:`gossip.sim.streams`), exactly as the compiled gossip sweep draws them;
* a node keeps ``y``, ``z`` and the time ``last`` it was brought up to; an activation of {v, w}
  at T mixes both ends from ``last`` to T (:func:`gossip.model.mixing.mix`, for acd), computes
  ``g = grad f^*(y)`` at both and adds the flow of :func:`gossip.model.jumps.edge_flow`, the same
  operations as the engine's, in the same order;
* ``grad f_v^*`` comes from the problem set's plain arrays
  (:meth:`~gossip.problems.base.ProblemSet.conjugate_arrays`): affine for quadratic and ridge,
  for logistic the live node's compiled Newton (:mod:`gossip.problems.newton_kernel`), warm
  started from the node's latest answer in its run and corrected to first order with that
  answer's Hessian factor. The engine's batched Newton starts from the same answer; both stop
  at ``|grad f_v(x) - y| <= tol``;
* dgd (the primal baseline): both ends average and step along their own gradient at the
  average (:mod:`gossip.dual.steps`), from the problem set's
  :meth:`~gossip.problems.base.ProblemSet.gradient_arrays` (affine ``H_v x - c_v``, or
  logistic's rows); each run its own step (``DualBlockSpec.alphas``, the step search's);
* at a recorded time every node is mixed to it (the state is kept) and its estimate measured,
  as :func:`gossip.dual.engine.estimates` does; the kernel returns each run's mean estimate,
  and the objective gap ``F(mean) - F*`` is computed here with the problem set's ``values``.

So the two engines follow the same trajectories: to rounding for affine problems (the tests
hold the errors to 1e-9 relative), and for logistic to within what Newton's tolerance lets two
answers differ by, ``tol / mu`` per answer. Why: the numpy engine sweeps the runs of a block in
lock step, one row of activations per numpy call, and pays numpy's per-call cost on small
arrays at every activation: 26 us per logistic activation with 60 runs on line:30, 64 us with
10. Here an activation costs its arithmetic (``benchmarks/bench_optimize_sim.py``).

Where a full Newton step does not shrink the residual (y moved far since the node's last answer,
as acd's mixing with z does), the answer is solved again from the last one with a line search
(:func:`gossip.problems.newton_kernel.careful_answer`, the batched solver's Armijo rule). If
even that fails (out of steps, or a Hessian not positive definite in floating point), the kernel
stops and the block's runs from that one on are swept by the numpy engine.
Problem sets without plain arrays are always swept by the numpy engine.

numba is optional: :func:`dual_kernel_available` says whether the kernel can run here (numba
imports, and ``GOSSIP_SIM_ENGINE=numpy`` does not turn the compiled simulators off).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.dual.engine import BlockCurves, DualBlockSpec, run_dual_block
from continuized.gossip.dual.params import DualAlgorithm
from continuized.gossip.problems.arrays import (
    AffineConjugate,
    AffineGradient,
    ConjugateArrays,
    GradientArrays,
)
from continuized.gossip.sim.compiled import compiles_first, kernel_available
from continuized.gossip.sim.events import EdgeSampler, chunk_bounds

__all__ = [
    "compiled_form",
    "dual_kernel_available",
    "dual_kernel_compiles",
    "run_dual_block_compiled",
]

FloatArray = NDArray[np.float64]

AFFINE_EVENTS_PER_CALL = 1 << 20
"""Activations (about) swept per kernel call with an affine ``grad f^*``."""

NEWTON_EVENTS_PER_CALL = 1 << 15
"""The same with Newton's (each costs about 5-10 us): progress comes about every 0.3 s."""

_kernel: list[Callable[..., int]] = []
_lock = threading.Lock()


def dual_kernel_available() -> bool:
    """Whether the compiled optimization sweep can run here (the first call imports numba)."""
    return _load() is not None


def dual_kernel_compiles() -> bool:
    """Whether the first compiled sweep in this process compiles the kernel (numba's cache is
    cold for it: :func:`gossip.sim.compiled.compiles_first`); False where it cannot run."""
    kernel = _load()
    return kernel is not None and compiles_first(kernel)


def _load() -> Callable[..., int] | None:
    if not kernel_available():  # numba, and GOSSIP_SIM_ENGINE, as the gossip sweep's
        return None
    with _lock:
        if not _kernel:
            from continuized.gossip.dual.kernel import sweep_dual_runs

            _kernel.append(sweep_dual_runs)
    return _kernel[0]


def compiled_form(
    algorithm: DualAlgorithm, problems: Any
) -> ConjugateArrays | GradientArrays | None:
    """The problem set's plain arrays if the compiled sweep can run ``algorithm`` on it
    (:meth:`~gossip.problems.base.ProblemSet.conjugate_arrays` for acd and cd,
    :meth:`~gossip.problems.base.ProblemSet.gradient_arrays` for dgd), else None."""
    name = "gradient_arrays" if algorithm is DualAlgorithm.DGD else "conjugate_arrays"
    form = getattr(problems, name, None)
    return None if form is None else form()


def run_dual_block_compiled(
    spec: DualBlockSpec, report: Callable[[int], None] | None = None
) -> BlockCurves:
    """Simulate the block's runs with the compiled kernel: the curves of
    :func:`gossip.dual.engine.run_dual_block` (module header), which sweeps the runs from the
    one where a Newton solve stalled on.

    Raises
    ------
    RuntimeError
        numba is not available, or the algorithm or problem set has no compiled form
        (callers check :func:`dual_kernel_available` and :func:`compiled_form` first).
    """
    kernel = _load()
    form = compiled_form(spec.params.algorithm, spec.problems)
    if kernel is None or form is None:
        raise RuntimeError("the compiled optimization sweep needs numba and the problems' arrays")
    from continuized.gossip.sim.streams import seed_words  # numba imports: _load succeeded

    problems, p = spec.problems, spec.params
    n, d = problems.n, problems.dim
    newton = not isinstance(form, AffineConjugate | AffineGradient)
    primal = p.algorithm is DualAlgorithm.DGD
    # Every run starts each node's Newton (and dgd its x_v) from its local minimiser
    # grad f_v^*(0), solved here from 0 (not from the problem set's own warm starts, which
    # other threads may be moving).
    zeros = np.zeros((n, d))
    solve: Callable[..., FloatArray] = problems.grad_conjugate  # the built-ins take x0
    local = (
        np.ascontiguousarray(solve(np.arange(n, dtype=np.intp), zeros, x0=zeros))
        if newton or primal
        else zeros
    )
    alphas = np.ascontiguousarray(
        np.full(spec.n_runs, float(p.alpha) if primal else 0.0)
        if spec.alphas is None
        else spec.alphas,
        dtype=np.float64,
    )
    sampler = EdgeSampler.from_probs(spec.probs)
    chunks = chunk_bounds(spec.grid)
    recorded = int(spec.record.sum())
    curves = BlockCurves(*(np.empty((spec.n_runs, recorded)) for _ in range(3)))
    means = np.empty((spec.n_runs, recorded, d))
    accelerated = p.algorithm is DualAlgorithm.ACD
    fixed: tuple[Any, ...] = (
        np.ascontiguousarray(spec.edges[:, 0], dtype=np.int64),
        np.ascontiguousarray(spec.edges[:, 1], dtype=np.int64),
        sampler.accept,
        sampler.alias,
        sampler.uniform,
        spec.grid,
        spec.record,
        np.array([(i0, i1) for i0, i1, _ in chunks], dtype=np.int64).reshape(-1, 2),
        np.array([s for _, _, s in chunks], dtype=np.float64),
        accelerated,
        primal,
        float(p.eta),
        float(p.gamma_prime),
        np.ascontiguousarray(p.steps if p.steps.size else np.zeros(len(spec.edges))),
        spec.estimate == "z" and accelerated,
        *_problem_arguments(form, n, d),
        local,
        np.ascontiguousarray(spec.x_star, dtype=np.float64),
    )
    words = seed_words(spec.seed)
    span = max(float(spec.grid[-1]) if spec.grid.size else 0.0, 1.0)
    budget = NEWTON_EVENTS_PER_CALL if newton else AFFINE_EVENTS_PER_CALL
    per_call = max(1, int(budget / span))
    runs = spec.runs.tolist()
    first = 0
    while first < len(runs):
        # The kernel sweeps consecutive run indices: a group ends where the block's do not.
        count = 1
        while (
            count < per_call
            and first + count < len(runs)
            and runs[first + count] == runs[first] + count
        ):
            count += 1
        part = slice(first, first + count)
        done = kernel(
            words,
            runs[first],
            *fixed,
            alphas[part],
            curves.errors[part],
            curves.consensus[part],
            means[part],
        )
        if done < 0:  # even the line search failed: the numpy engine's solver may not
            rest = dataclasses.replace(
                spec,
                runs=spec.runs[first:],
                alphas=None if spec.alphas is None else spec.alphas[first:],
            )
            tail = run_dual_block(rest, report)
            for name in ("errors", "consensus", "gaps"):
                getattr(curves, name)[first:] = getattr(tail, name)
            break
        if report is not None:
            report(int(done))
        first += count
    if first:  # the runs swept here: their gaps from their means
        swept = means[:first].reshape(-1, d)
        curves.gaps[:first] = problems.values(swept).reshape(first, recorded) - spec.f_star
    return curves


def _problem_arguments(form: ConjugateArrays | GradientArrays, n: int, d: int) -> tuple[Any, ...]:
    """The kernel's ``offset, columns, identity, As, norms, inv_m, lam, tol, max_steps,
    max_halvings``."""
    if isinstance(form, AffineConjugate | AffineGradient):
        columns = (
            np.zeros((0, 0, 0))
            if form.matrix is None
            else np.ascontiguousarray(form.matrix.transpose(0, 2, 1))
        )
        return (
            form.offset,
            columns,
            form.matrix is None,
            np.zeros((0, 0, 0)),
            np.zeros((0, 0)),
            np.zeros(0),
            0.0,
            0.0,
            0,
            0,
        )
    return (
        np.zeros((0, d)),
        np.zeros((0, 0, 0)),
        False,
        form.As,
        form.norms,
        np.ascontiguousarray(form.inv_m, dtype=np.float64),
        float(form.lam),
        float(form.tol),
        int(form.max_steps),
        int(form.max_halvings),
    )
