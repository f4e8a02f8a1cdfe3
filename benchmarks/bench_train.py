"""Decentralized training, simulated (``gossip.train``): what acceleration buys, and what it costs.

1. Consensus: with ``lr = 0`` and a different random model on every node, the median t until the
   consensus distance ``(1/n) sum_v |x_v - x_bar|^2`` falls to 1e-8 of its start, a2cid2 against
   adpsgd on cycle:32 at rate-com 1 (theory: the rates are ``1/sqrt(chi1 chi2)`` against
   ``1/chi1``, a factor ``sqrt(chi1 / chi2)`` = 7.3 on cycle:32).
2. Training: t until the average model reaches 90% test accuracy, digits, MLP 64, cycle:16,
   Dirichlet(0.1) shards, a2cid2 against adpsgd and allreduce, over runs of one seed (each run
   its own events, mini-batches and initial model).
3. Where an event's time goes, for the MLP on digits (d = 4810): the gradient, the on-demand
   mixing, a communication. That is what decides whether a numba kernel would pay.
4. RSS of one process holding one node's state for the MLP on digits (target on a Pi: 120 MB).

Figures are CPU seconds of this process (``time.process_time``): the machine is shared.
Run: ``python benchmarks/bench_train.py`` (``--help`` for options).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from continuized.gossip.train import Sgd, Workers, make_problem, run_training


def _first_below(result: Any, fraction: float) -> list[float | None]:
    start = result.curves["consensus"][:, 0]
    out: list[float | None] = []
    for row, s in zip(result.curves["consensus"], start, strict=True):
        hits = np.flatnonzero(row <= fraction * s)
        out.append(float(result.t_grid[hits[0]]) if hits.size else None)
    return out


def _spread(times: list[float | None]) -> str:
    known = [t for t in times if t is not None]
    never = len(times) - len(known)
    if not known:
        return "never"
    late = np.array([np.inf if t is None else t for t in times])
    text = f"median {np.median(late):.4g}, min {min(known):.4g}, max {max(known):.4g}"
    return text + (f", {never} never" if never else "")


def consensus(runs: int, t_end: float) -> None:
    """Section 1."""
    problem = make_problem(
        "cycle:32", "softmax", "iris", "iid:0", lr=0.0, momentum=0.0, per_node_init=True
    )
    c = problem.constants
    grid = np.linspace(0.0, t_end, int(t_end) + 1)
    began = time.process_time()
    results = run_training(problem, ["a2cid2", "adpsgd"], grid, runs, seed=0)
    cpu = time.process_time() - began
    print(
        f"consensus to 1e-8 of its start, cycle:32, rate-com 1, {runs} runs "
        f"(chi1 = {c.chi1:.4g}, chi2 = {c.chi2:.4g}, eta = {c.eta:.4g}, "
        f"alpha~ = {c.alpha_tilde:.4g}; {cpu:.1f} CPU s):"
    )
    medians = {}
    for name, r in results.items():
        times = _first_below(r, 1e-8)
        medians[name] = np.median([np.inf if t is None else t for t in times])
        print(f"  {name:>7}: t = {_spread(times)}")
    print(
        f"  speed-up adpsgd / a2cid2 = {medians['adpsgd'] / medians['a2cid2']:.2f}x "
        f"(theory's rate ratio sqrt(chi1 / chi2) = {np.sqrt(c.chi1 / c.chi2):.2f})"
    )


def accuracy(runs: int, t_end: float, lr: float, momentum: float) -> None:
    """Section 2."""
    problem = make_problem(
        "cycle:16", "mlp:64", "digits", "dirichlet:0.1:0", lr=lr, momentum=momentum
    )
    grid = np.linspace(0.0, t_end, int(t_end / 2.5) + 1)
    began = time.process_time()
    results = run_training(problem, ["a2cid2", "adpsgd", "allreduce"], grid, runs, seed=0)
    cpu = time.process_time() - began
    print(
        f"\nt to 90% test accuracy of the average model, digits, MLP 64, cycle:16, "
        f"Dirichlet(0.1), lr {lr:g}, momentum {momentum:g}, {runs} runs, grid step 2.5 "
        f"({cpu:.1f} CPU s):"
    )
    for name, r in results.items():
        times = r.first_time("accuracy", 0.9, above=True)
        final = r.median("accuracy")[-1]
        consensus = r.median("consensus")[-1]
        print(
            f"  {name:>9}: t = {_spread(times)}; at t = {t_end:g}: accuracy {final:.1%}, "
            f"consensus {consensus:.3g}"
        )


def event_costs(repeat: int) -> None:
    """Section 3."""
    problem = make_problem("cycle:16", "mlp:64", "digits", "iid:0")
    model, shard = problem.model, problem.data.shards[0]
    c = problem.constants
    workers = Workers("a2cid2", problem.initial(0, 0), Sgd(0.1, 0.9), c.eta, c.alpha_tilde)
    rng = np.random.default_rng(0)
    params = workers.params_at(0, 0.0).copy()

    def per_call(call: Any) -> float:
        # One BLAS thread, as the simulation runs (gossip.train.trainer).
        with threadpool_limits(limits=1, user_api="blas"):
            began = time.process_time()
            for k in range(repeat):
                call(k)
            return (time.process_time() - began) / repeat * 1e6

    def gradient(_: int) -> None:
        rows = rng.integers(shard.m, size=problem.batch_size)
        model.loss_and_grad(params, (shard.A[rows], shard.y[rows]))

    grad = per_call(gradient)
    mixing = per_call(lambda k: workers.params_at(1, 0.01 * (k + 1)))
    step = per_call(lambda _: workers.apply_gradient(1, params))
    comm = per_call(lambda k: workers.communicate(2, 3, 0.01 * (k + 1)))
    evaluate = per_call(lambda _: model.predict(params, problem.data.test.A)) * problem.topology.n
    print(
        f"\nwhere an event's time goes (MLP 64 on digits, d = {params.size}, batch "
        f"{problem.batch_size}, mean of {repeat} calls, CPU microseconds):\n"
        f"  gradient (forward + backward): {grad:.0f}\n"
        f"  mixing one node to now (a2cid2): {mixing:.0f}\n"
        f"  momentum step: {step:.0f}\n"
        f"  communication (both mixed + jump): {comm:.0f}\n"
        f"  one grid point's per-node test accuracy (16 nodes): {evaluate:.0f}"
    )


_RSS_SCRIPT = """
import os, psutil
proc = psutil.Process()
def mb(): return proc.memory_info().rss / 2**20
import numpy as np
base = mb()
from continuized.gossip.datasets.load import load_node_shard
from continuized.gossip.train import Network, node_stream
shard = load_node_shard({data!r}, "iid:0", 16, 3)
data = mb()
net = Network(64, (64,), 10, np.dtype(np.{dtype}))
x = net.initial(np.random.default_rng(0)); z = x.copy(); m = np.zeros_like(x)
rng = node_stream(0, 3)
A = shard.A.astype(x.dtype); y = shard.b.astype(np.intp)
for _ in range(200):
    rows = rng.integers(shard.m, size=16)
    _, g = net.loss_and_grad(x, (A[rows], y[rows]))
    m = 0.9 * m + g; x -= 0.1 * m; z -= 0.1 * m
print(f"{{base:.1f}} {{data:.1f}} {{mb():.1f}} {{3 * x.nbytes / 1024:.1f}}")
"""


def rss() -> None:
    """Section 4."""
    from sklearn.datasets import load_digits

    print("\nRSS of one node's process (MLP 64 on digits, x, x~ and momentum, 200 steps):")
    with tempfile.TemporaryDirectory() as tmp:
        npz = Path(tmp) / "digits.npz"
        bunch = load_digits()
        np.savez(npz, X=bunch.data, y=bunch.target)
        for source, data in (("sklearn's loader", "digits"), ("npz file", f"npz:{npz}")):
            for dtype in ("float64", "float32"):
                out = subprocess.run(
                    [sys.executable, "-c", _RSS_SCRIPT.format(dtype=dtype, data=data)],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.split()
                base, loaded, final, state = (float(v) for v in out)
                print(
                    f"  {dtype}, shard from {source}: python + numpy {base:.1f} MB, with the "
                    f"shard {loaded:.1f} MB, after training {final:.1f} MB "
                    f"(the state itself {state:.1f} KB)"
                )


def main() -> None:
    """Run the four sections."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per algorithm")
    parser.add_argument("--consensus-t", type=float, default=1500.0, help="horizon, section 1")
    parser.add_argument("--accuracy-t", type=float, default=150.0, help="horizon, section 2")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--repeat", type=int, default=2000, help="calls per cost, section 3")
    parser.add_argument(
        "--only", choices=("consensus", "accuracy", "costs", "rss"), help="one section"
    )
    args = parser.parse_args()
    if args.only in (None, "consensus"):
        consensus(args.runs, args.consensus_t)
    if args.only in (None, "accuracy"):
        accuracy(args.runs, args.accuracy_t, args.lr, args.momentum)
    if args.only in (None, "costs"):
        event_costs(args.repeat)
    if args.only in (None, "rss"):
        rss()


if __name__ == "__main__":
    main()
