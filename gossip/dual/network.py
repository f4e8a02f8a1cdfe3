"""Build the network's problems from the command line's specs (problem, data set, split).

The one place where the optimizers meet :mod:`gossip.problems` and :mod:`gossip.datasets`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from continuized.gossip.datasets import dadao_shards, load_shards
from continuized.gossip.dual.engine import BatchProblems
from continuized.gossip.problems import make_problem_set
from continuized.gossip.problems.specs import check_targets

__all__ = ["Network", "build_network", "dadao_network"]


@dataclass(frozen=True, eq=False)
class Network:
    """The nodes' problems and a one-line description of where their data came from."""

    problems: BatchProblems
    description: str


def build_network(problem: str, data: str | None, split: str | None, n: int) -> Network:
    """Return the problems of ``n`` nodes: ``problem`` on the shards of ``data`` cut by ``split``.

    ``quadratic`` takes no data (``data`` is then ignored). Targets the problem cannot use
    are refused here, before any work (:func:`~gossip.problems.specs.check_targets`).
    """
    if problem.strip().lower() == "quadratic" or data is None:
        problems = make_problem_set(problem, None, n=n)
        return Network(problems, f"{problem}: {n} nodes, no data (onehot values)")
    shards, description = load_shards(data, split or "iid:0", n)
    check_targets(problem, data, np.concatenate([s.b for s in shards]))
    return Network(make_problem_set(problem, shards), description)


def dadao_network(problem: str, seed: int) -> Network:
    """The DADAO paper's synthetic setting (10 workers, d = 2) under ``problem``."""
    shards = dadao_shards(seed)
    description = (
        "DADAO synthetic: 10 workers x 100 samples, d = 2, slope U(0.01, 5) per worker, noise 10"
    )
    return Network(make_problem_set(problem, shards), description)
