"""An optimization run's node side: its own problem, from its own shard (the paper's Section 7).

The Bootstrap of an optimization run names the problem, the data source and the split, and the
node's id among ``n`` (:class:`gossip.wire.schema.Bootstrap`); the node loads its shard itself, on
its own machine, and never receives data. ``gossip node --data SPEC`` overrides the data
source, for data that only this machine holds (``csv:DIR`` with ``DIR/node-<id>.csv``, or a
local copy of the public set).

The node then keeps the dual pair ``(y, z)`` in its ledger (both start at 0), exchanges
``u = grad f_v^*(y_v(T))`` (:func:`exchange_value`) and reports the primal ``x_v =
grad f_v^*(y_v)`` beside ``y_v`` and ``z_v`` (:func:`primal_report`); ``y`` and ``z`` are not
data, and the coordinator needs them to check that the dual sums stay at 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from continuized.gossip.errors import ConfigError
from continuized.gossip.model.mixing import Values
from continuized.gossip.wire.schema import Bootstrap

__all__ = ["exchange_value", "load_problem", "preload", "primal_report"]


def preload(data: str) -> None:
    """Read the data source ``data`` once, before registering (``gossip node --data``).

    Importing the readers and reading the source are the slow part of loading a shard (seconds
    on a small machine), and so is loading the compiled solver; done after the bootstrap they
    would start this node's clock late, and the activations it then fires in a burst break the
    accelerated process. Cutting the shard after the bootstrap is then quick.

    Raises
    ------
    ConfigError
        An unknown or unreadable data source (named).
    """
    from continuized.gossip.datasets.sources import node_file, read_rows
    from continuized.gossip.problems.compiled_newton import compiled_solver

    if node_file(data) is None:  # csv:DIR holds one file per node: read only ours, later
        read_rows(data)
    compiled_solver()  # imports numba (and compiles, if its cache is empty) now, not at t = 0


def load_problem(boot: Bootstrap, data: str | None = None) -> Any:
    """Return this node's ``LocalProblem`` built from its own shard only.

    Parameters
    ----------
    boot : Bootstrap
        An optimization run's Bootstrap (``boot.problem`` not empty).
    data : str, optional
        A data spec on this machine that replaces ``boot.data``.

    Raises
    ------
    ConfigError
        The problem, data source or split is unknown, the shard is empty, or its width is not
        the cluster's ``d`` (the message names the value and the expected width).
    """
    if not boot.problem:
        raise ConfigError("this cluster runs gossip, not an optimization problem")
    from continuized.gossip.datasets import load_node_shard
    from continuized.gossip.problems import make_local_problem, make_problem_set

    source = data or boot.data
    if boot.problem.strip().lower() == "quadratic" or not source:
        # No data: the problem set is fixed by its spec and n alone (as in the simulator).
        problem = make_problem_set(boot.problem, None, n=boot.n).local(boot.node_id)
    else:
        # Cut on this machine from data read here (never the coordinator's copy); csv:DIR
        # reads only this node's file. The split is deterministic in its seed.
        shard = load_node_shard(source, boot.split, boot.n, boot.node_id)
        problem = make_local_problem(boot.problem, shard, node=boot.node_id)
    if int(problem.dim) != boot.dim:
        raise ConfigError(
            f"this node's shard of {source!r} (node {boot.node_id} of {boot.n}, split "
            f"{boot.split!r}) has {problem.dim} features, but the cluster's problem "
            f"{boot.problem!r} has d = {boot.dim}; give every node data of width {boot.dim}"
        )
    return problem


def exchange_value(problem: Any) -> Callable[[Values], list[float]]:
    """Return ``y -> grad f^*(y)`` on plain floats: the value a node exchanges at a jump."""
    conjugate = problem.grad_conjugate

    def value(y: Values) -> list[float]:
        out: list[float] = conjugate(np.asarray(y, dtype=np.float64)).tolist()
        return out

    return value


def primal_report(problem: Any, y: Sequence[float]) -> list[float]:
    """Return the primal estimate ``x_v = grad f_v^*(y_v)`` for the node's report."""
    return exchange_value(problem)(y)
