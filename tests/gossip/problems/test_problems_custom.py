"""A user-defined problem (examples/huber_problem.py) loaded through ``module:callable``."""

from __future__ import annotations

import numpy as np

from continuized.gossip.datasets import load_node_shard, load_shards
from continuized.gossip.problems import (
    ListProblemSet,
    LocalProblem,
    make_local_problem,
    make_problem_set,
)

SPEC = "examples.huber_problem:make"


def test_example_loads_per_node_and_as_a_set() -> None:
    shards, _ = load_shards("diabetes", "iid:2", 3)
    problems = make_problem_set(SPEC, shards)
    assert isinstance(problems, ListProblemSet)
    assert (problems.n, problems.dim) == (3, 10)
    # a live node builds the same function from its own shard only
    own = make_local_problem(SPEC, load_node_shard("diabetes", "iid:2", 3, 1), node=1)
    assert isinstance(own, LocalProblem)
    x = np.linspace(-1, 1, 10)
    assert own.value(x) == problems.local(1).value(x)
    # its conjugate gradient inverts its gradient, batched or not
    y = np.random.default_rng(0).normal(size=(4, 10)) * 0.05
    nodes = np.array([0, 2, 2, 1], dtype=np.intp)
    g = problems.grad_conjugate(nodes, y)
    assert np.allclose(problems.grad(nodes, g), y, atol=1e-8)
    star = problems.x_star()
    # the generic x* (L-BFGS, then a root polish): the total gradient shrinks by 1e-10
    start = np.linalg.norm(problems.total_grad(np.zeros(10)))
    assert np.linalg.norm(problems.total_grad(star)) <= 1e-10 * start
