"""Benchmark: the cost of one batched ``ProblemSet.grad_conjugate`` call, against a per-row loop.

Run with ``python benchmarks/bench_problems.py [--rows 200] [--nodes 16] [--repeat 5]``.
On breast-cancer (569 x 30, iid split over ``--nodes`` nodes) the dual simulator asks for
``grad f_v^*(y)`` on ``~2 x runs`` rows per activation. For ridge and logistic this prints the
microseconds per row of the batched call and of the baseline, a Python loop over
``local(v).grad_conjugate`` measured in the same run, and their ratio; for logistic, also the
batched call started from a good guess (``x0``: the answer to a nearby ``y``), which is how the
simulator calls it step after step.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.datasets import Shard, load_shards
from continuized.gossip.problems import make_problem_set


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    """Print per-row costs and ratios for ridge and logistic."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    shards, text = load_shards("breast-cancer", "iid:0", args.nodes)
    print(f"data: {text}; {args.rows} rows per call, best of {args.repeat}")
    rng = np.random.default_rng(0)
    nodes = rng.integers(0, args.nodes, size=args.rows).astype(np.intp)
    y = rng.normal(size=(args.rows, shards[0].dim)) * 0.05
    near = y + rng.normal(size=y.shape) * 1e-3
    for spec in ("ridge:0.1", "logistic:0.1"):
        _case(spec, shards, nodes, y, near, args.repeat)


def _case(
    spec: str,
    shards: list[Shard],
    nodes: NDArray[np.intp],
    y: NDArray[np.float64],
    near: NDArray[np.float64],
    repeat: int,
) -> None:
    problems = make_problem_set(spec, shards)
    locals_ = [problems.local(v) for v in range(problems.n)]

    def loop() -> None:
        # The baseline: one node at a time (a local logistic warm-starts from its last answer).
        for v, row in zip(nodes, y, strict=True):
            locals_[int(v)].grad_conjugate(row)

    def cold() -> None:
        problems.grad_conjugate(nodes, y, x0=np.zeros_like(y))

    answer = problems.grad_conjugate(nodes, y)

    def from_guess() -> None:
        problems.grad_conjugate(nodes, near, x0=answer)

    batched, base = _best(cold, repeat), _best(loop, repeat)
    per = 1e6 / len(nodes)
    print(
        f"{spec:13s} batched {batched * per:8.1f} us/row   loop {base * per:8.1f} us/row   "
        f"loop / batched = {base / batched:5.1f}"
    )
    if spec.startswith("logistic"):
        warm = _best(from_guess, repeat)
        print(
            f"{'':13s} batched from x0 {warm * per:8.1f} us/row   "
            f"cold / from x0 = {batched / warm:5.1f}   loop / from x0 = {base / warm:5.1f}"
        )


if __name__ == "__main__":
    main()
