"""Benchmark of the optimizer: batched runs against one run at a time, and the figure command.

Run with ``python benchmarks/bench_optim.py``. Figures are ratios measured in the same process,
so they mean the same on any machine: how much the ``runs=`` batch saves over a Python loop of
single runs (what makes the 1000-run figure fast), and how the continuized method's cost per
step compares with Nesterov's (the exact mixing costs a few array operations per step).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable

import numpy as np

from continuized.gossip.optim import continuized_nesterov, nesterov, paper_convex
from continuized.gossip.optim.figures import write_optim_figures


def _best_of(repeat: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    """Print the benchmark figures."""
    q = paper_convex()
    x0 = np.zeros(q.dim)
    n_steps, runs, loop_runs = 1000, 1000, 20

    def batch() -> None:
        continuized_nesterov(
            q.grad, x0, 1.0, 0.0, n_steps, 0, f=q.f, runs=runs, keep_iterates=False
        )

    def loop() -> None:
        for seed in range(loop_runs):
            continuized_nesterov(q.grad, x0, 1.0, 0.0, n_steps, seed, f=q.f, keep_iterates=False)

    def one_nesterov() -> None:
        nesterov(q.grad, x0, 1.0, 0.0, n_steps, f=q.f, keep_iterates=False)

    def one_continuized() -> None:
        continuized_nesterov(q.grad, x0, 1.0, 0.0, n_steps, 0, f=q.f, keep_iterates=False)

    t_batch = _best_of(3, batch)
    t_loop = _best_of(3, loop) * runs / loop_runs
    t_nest = _best_of(5, one_nesterov)
    t_cont = _best_of(5, one_continuized)
    print(f"convex d=100, {n_steps} steps:")
    print(f"  {runs} runs batched: {t_batch:.2f} s; one at a time (extrapolated): {t_loop:.2f} s")
    print(f"  batch speed-up: {t_loop / t_batch:.1f}x")
    print(f"  one run, continuized / Nesterov time: {t_cont / t_nest:.2f}")
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        write_optim_figures(out)
        print(f"gossip reproduce optim-figure (defaults): {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
