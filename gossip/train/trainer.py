"""The exact, event-driven simulation of decentralized training (``gossip train``).

Every gradient step and every communication is an event of :class:`~gossip.train.clocks.EventClock`,
with no time grid: an event brings only its own nodes up to date
(:meth:`~gossip.train.workers.Workers.params_at`), and the metrics are taken on the grid of t by
bringing every node to the grid time first. Sans-IO: the caller passes the seed and receives the
curves; progress goes through a callback.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.topology import Topology, parse_topology
from continuized.gossip.train.clocks import (
    GRADIENT,
    EventClock,
    clock_stream,
    init_stream,
    node_stream,
)
from continuized.gossip.train.constants import AcidConstants, acid_constants
from continuized.gossip.train.models import Model, check_init, parse_model
from continuized.gossip.train.scores import METRICS, TrainingResult, evaluate
from continuized.gossip.train.trainset import TrainSet, load_trainset
from continuized.gossip.train.workers import Sgd, Workers

__all__ = [
    "TrainingProblem",
    "initial_models",
    "make_problem",
    "node_initial",
    "run_once",
    "run_training",
]

Progress = Callable[[str, float, float], None]


@dataclass(frozen=True, eq=False)
class TrainingProblem:
    """Everything a run needs but the algorithm and the seed.

    ``per_node_init``: each node draws its own initial model (else all start from one model,
    as decentralized training usually does; per-node starts measure consensus with ``lr = 0``).
    """

    model: Model
    data: TrainSet
    topology: Topology
    constants: AcidConstants
    sgd: Sgd
    batch_size: int = 16
    per_node_init: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"--batch-size must be an integer >= 1, got {self.batch_size}")
        if len(self.data.shards) != self.topology.n:
            raise ConfigError(
                f"{len(self.data.shards)} shards for {self.topology.n} nodes; they must match"
            )
        check_init(self.model, self.per_node_init)

    def initial(self, seed: int, run: int) -> NDArray[Any]:
        """Return the ``(n, d)`` initial parameters of run ``run`` (:func:`initial_models`)."""
        rows = initial_models(self.model, seed, run, self.per_node_init)
        return np.stack(list(itertools.islice(rows, self.topology.n)))


def initial_models(model: Model, seed: int, run: int, per_node: bool) -> Iterator[NDArray[Any]]:
    """Yield the initial models of nodes 0, 1, 2, ... of run ``run``, in order (endless).

    The rule of every initial model, the simulator's and a live node's alike: node 0's is
    the first draw of ``init_stream(seed, run)``; with ``per_node``, node ``k``'s is its
    ``(k + 1)``-th draw, else every node's is node 0's (the same array, yielded again).

    Examples
    --------
    >>> from continuized.gossip.train.models import Network
    >>> net = Network(4, (), 3, np.dtype(np.float64))
    >>> a, b = itertools.islice(initial_models(net, 0, 0, per_node=True), 2)
    >>> bool((a == b).all())
    False
    """
    rng = init_stream(seed, run)
    first = model.initial(rng)
    yield first
    while True:
        yield model.initial(rng) if per_node else first


def node_initial(model: Model, seed: int, run: int, node: int, per_node: bool) -> NDArray[Any]:
    """Return node ``node``'s initial model of run ``run``: row ``node`` of
    :meth:`TrainingProblem.initial`, bit for bit, in memory O(d) (:func:`initial_models`).

    With ``per_node`` it draws ``node + 1`` models in turn (the others are dropped at once),
    so its time grows with ``node``; a common start draws one.

    Examples
    --------
    >>> p = make_problem("cycle:4", "softmax", "iris", "iid:0", per_node_init=True)
    >>> bool((node_initial(p.model, 0, 0, 3, per_node=True) == p.initial(0, 0)[3]).all())
    True
    """
    if node < 0:
        raise ConfigError(f"a node's id is >= 0, got {node}")
    return next(itertools.islice(initial_models(model, seed, run, per_node), node, None))


def make_problem(
    graph: str,
    model: str,
    data: str,
    split: str,
    *,
    rate_com: float = 1.0,
    lr: float = 0.1,
    momentum: float = 0.9,
    batch_size: int = 16,
    dtype: str = "float64",
    test_fraction: float = 0.2,
    seed: int = 0,
    per_node_init: bool = False,
) -> TrainingProblem:
    """Build a :class:`TrainingProblem` from specs (those of ``gossip train``).

    ``seed`` fixes the held-out test rows and a user model's own initial draw; the split has
    its own seed in its spec.

    Examples
    --------
    >>> p = make_problem("cycle:4", "softmax", "iris", "iid:0")
    >>> p.topology.n, round(p.constants.eta, 4)
    (4, 0.5774)
    """
    topo = parse_topology(graph)
    trainset = load_trainset(data, split, topo.n, test_fraction, seed, dtype)
    net = parse_model(model, trainset.features, trainset.classes, dtype, seed)
    return TrainingProblem(
        net,
        trainset,
        topo,
        acid_constants(topo, rate_com),
        Sgd(lr, momentum),
        batch_size,
        per_node_init,
    )


def run_once(
    problem: TrainingProblem,
    algorithm: str,
    t_grid: NDArray[np.float64],
    seed: int,
    run: int = 0,
    progress: Callable[[float], None] | None = None,
    clock: int | None = None,
) -> NDArray[np.float64]:
    """Simulate one run of ``algorithm`` and return its metrics, shape ``(len(METRICS), grid)``.

    ``progress(t)`` is called at every grid time. The same ``(seed, run)`` gives the same
    events, mini-batches and initial model to every algorithm. ``clock`` takes the events of
    run ``clock`` instead (default: ``run``): runs that share their start and every node's
    mini-batches, and differ in their timing only, as a live cluster started from run ``run``
    differs from the simulator.
    """
    c = problem.constants
    topo = problem.topology
    workers = Workers(algorithm, problem.initial(seed, run), problem.sgd, c.eta, c.alpha_tilde)
    events = EventClock(topo.n, topo.edges, topo.probs, c.rate_com)
    streams = [node_stream(seed, v, run) for v in range(topo.n)]
    shards = problem.data.shards
    batch = problem.batch_size
    model = problem.model
    out = np.empty((len(METRICS), len(t_grid)))
    at = 0
    t_end = float(t_grid[-1])
    # A too large step overflows; the run then reads inf and the caller sees it diverged.
    with np.errstate(over="ignore", invalid="ignore"), _one_blas_thread():
        for t, kind, i, j in events.events(
            clock_stream(seed, run if clock is None else clock), t_end
        ):
            while at < len(t_grid) and t_grid[at] < t:
                out[:, at] = evaluate(model, workers.sync(float(t_grid[at])), problem.data)
                if progress is not None:
                    progress(float(t_grid[at]))
                at += 1
            if kind == GRADIENT:
                if problem.sgd.lr == 0:
                    continue  # the step is 0: skip its gradient (consensus-only runs)
                shard = shards[i]
                rows = streams[i].integers(shard.m, size=batch)
                _, grad = model.loss_and_grad(
                    workers.params_at(i, t), (shard.A[rows], shard.y[rows])
                )
                workers.apply_gradient(i, grad)
            else:
                workers.communicate(i, j, t)
        while at < len(t_grid):
            out[:, at] = evaluate(model, workers.sync(float(t_grid[at])), problem.data)
            if progress is not None:
                progress(float(t_grid[at]))
            at += 1
    return out


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    # A mini-batch's matrices are tiny: a multithreaded BLAS spends more time waking its
    # threads than multiplying (measured 6x slower per event on 2 busy cores).
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: only a matter of speed
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def run_training(
    problem: TrainingProblem,
    algorithms: Sequence[str],
    t_grid: NDArray[np.float64],
    runs: int,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict[str, TrainingResult]:
    """Run every algorithm ``runs`` times (runs ``0 .. runs-1`` of ``seed``) and collect the curves.

    ``progress(algorithm, done, total)`` reports the t simulated so far out of ``runs * t_end``.
    """
    if runs < 1:
        raise ConfigError(f"--runs must be an integer >= 1, got {runs}")
    grid = np.asarray(t_grid, dtype=np.float64)
    if grid.ndim != 1 or grid.size < 2 or grid[0] < 0 or np.any(np.diff(grid) <= 0):
        raise ConfigError("the time grid must be increasing, start at t >= 0 and have >= 2 points")
    t_end = float(grid[-1])
    results = {}
    for name in algorithms:
        rows = []
        for run in range(runs):

            def tick(t: float, name: str = name, run: int = run) -> None:
                if progress is not None:
                    progress(name, run * t_end + t, runs * t_end)

            rows.append(run_once(problem, name, grid, seed, run, tick))
        stacked = np.stack(rows)  # (runs, metrics, grid)
        curves = {m: stacked[:, k, :] for k, m in enumerate(METRICS)}
        params = {"lr": problem.sgd.lr, "momentum": problem.sgd.momentum}
        if name == "a2cid2":
            params |= {"eta": problem.constants.eta, "alpha_tilde": problem.constants.alpha_tilde}
        results[name] = TrainingResult(name, grid, curves, params)
    return results
