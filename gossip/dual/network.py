"""Build the network's problems from the command line's specs (problem, data set, split).

The one place where the optimizers meet :mod:`gossip.problems` and :mod:`gossip.datasets`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from gossip.dual.engine import BatchProblems
from gossip.errors import ConfigError

__all__ = ["Network", "build_network", "dadao_network"]


@dataclass(frozen=True, eq=False)
class Network:
    """The nodes' problems and a one-line description of where their data came from."""

    problems: BatchProblems
    description: str


def build_network(problem: str, data: str | None, split: str | None, n: int) -> Network:
    """Return the problems of ``n`` nodes: ``problem`` on the shards of ``data`` cut by ``split``.

    ``quadratic`` takes no data (``data`` is then ignored).
    """
    datasets, problems_mod = _module("gossip.datasets"), _module("gossip.problems")
    if problem.strip().lower() == "quadratic" or data is None:
        problems = problems_mod.make_problem_set(problem, None, n=n)
        return Network(problems, f"{problem}: {n} nodes, no data")
    shards, description = datasets.load_shards(data, split or "iid:0", n)
    return Network(problems_mod.make_problem_set(problem, shards), str(description))


def dadao_network(problem: str, seed: int) -> Network:
    """The DADAO paper's synthetic setting (10 workers, d = 2) under ``problem``."""
    shards = _module("gossip.datasets").dadao_shards(seed)
    description = (
        "DADAO synthetic: 10 workers x 100 samples, d = 2, slope U(0.01, 5) per worker, noise 10"
    )
    return Network(_module("gossip.problems").make_problem_set(problem, shards), description)


def _module(name: str) -> ModuleType:
    # Imported by name: the problems and data sets are a sibling package of the core.
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ConfigError(f"{name} is not available ({exc}); problems need it") from None
