"""Bad problem specs and data: a ConfigError whose message names the bad value."""

from __future__ import annotations

import numpy as np
import pytest

from continuized.gossip.datasets import Shard
from continuized.gossip.errors import ConfigError
from continuized.gossip.problems import make_local_problem, make_problem_set


def _shard(m: int = 5, d: int = 2, seed: int = 0) -> Shard:
    rng = np.random.default_rng(seed)
    return Shard.of(rng.normal(size=(m, d)), rng.integers(0, 2, size=m), name=f"node {seed}")


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("lasso:0.1", "lasso:0.1"),
        ("quadratic:3", "quadratic:3"),
        ("ridge:abc", "ridge:abc"),
        ("ridge:-1", "-1"),
        ("logistic:nan", "nan"),
        ("", "''"),
    ],
)
def test_unknown_or_malformed_problem(spec: str, named: str) -> None:
    with pytest.raises(ConfigError, match=r"valid problems|LAMBDA") as err:
        make_problem_set(spec, [_shard()])
    assert named in str(err.value)


def test_singular_ridge_without_regularisation_is_named() -> None:
    # 3 rows in dimension 4: A^T A has rank 3
    shard = Shard.of(np.random.default_rng(0).normal(size=(3, 4)), np.ones(3), name="node 7")
    with pytest.raises(ConfigError, match=r"ridge:0 on node 7.*singular.*LAMBDA > 0"):
        make_problem_set("ridge:0", [_shard(6, 4), shard])
    assert make_problem_set("ridge:0.5", [_shard(6, 4), shard]).mu >= 0.5


def test_logistic_needs_positive_lambda() -> None:
    with pytest.raises(ConfigError, match=r"LAMBDA must be a finite number > 0.*got 0"):
        make_local_problem("logistic:0", _shard())


def test_problems_on_data_need_data() -> None:
    with pytest.raises(ConfigError, match="'ridge:1' needs data"):
        make_problem_set("ridge:1", None, n=3)
    with pytest.raises(ConfigError, match="'logistic:1' needs data"):
        make_local_problem("logistic:1", None)


def test_shards_of_different_width() -> None:
    with pytest.raises(ConfigError, match=r"node 1 has 3 features.*2"):
        make_problem_set("ridge:1", [_shard(5, 2, 0), _shard(5, 3, 1)])


def test_quadratic_needs_n_or_values() -> None:
    with pytest.raises(ConfigError, match="n = None"):
        make_problem_set("quadratic", None)
    with pytest.raises(ConfigError, match="n = 3 but values has 2 rows"):
        make_problem_set("quadratic", None, n=3, values=np.zeros((2, 1)))
    with pytest.raises(ConfigError, match="value vector"):
        make_local_problem("quadratic", None)


@pytest.mark.parametrize(
    ("A", "b", "match"),
    [
        (np.zeros((0, 2)), np.zeros(0), "empty shard"),
        (np.array([[1.0, np.nan]]), np.array([1.0]), "non-finite.*row 0"),
        (np.ones((3, 2)), np.array([1.0, np.inf, 0.0]), "non-finite.*row 1"),
        (np.ones((3, 2)), np.ones(2), "3 rows of features but 2 targets"),
    ],
)
def test_bad_shards(A: np.ndarray, b: np.ndarray, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Shard.of(A, b, name="node 3")


def test_bad_batch_shapes_and_node_ids() -> None:
    problems = make_problem_set("ridge:1", [_shard(), _shard(seed=1)])
    with pytest.raises(ConfigError, match=r"node ids must be in \[0, 2\), got 0..5"):
        problems.grad_conjugate(np.array([0, 5], dtype=np.intp), np.zeros((2, 2)))
    with pytest.raises(ConfigError, match=r"shape \(k, 2\), got \(2, 3\)"):
        problems.grad_conjugate(np.array([0, 1], dtype=np.intp), np.zeros((2, 3)))


def test_user_defined_problem_errors() -> None:
    with pytest.raises(ConfigError, match="no module 'no_such_mod' in "):
        make_problem_set("no_such_mod:make", [_shard()])
    with pytest.raises(ConfigError, match="has no callable 'nope'"):
        make_problem_set("examples.huber_problem:nope", [_shard()])
    with pytest.raises(ConfigError, match="returned Shard, which lacks"):
        make_problem_set("tests_problem_helpers:not_a_problem", [_shard()])


@pytest.mark.parametrize(
    ("data", "targets", "words"),
    [
        ("diabetes", [151.0, 75.0, 141.0, 206.0], "4 distinct integer targets from 75 to 206"),
        ("npz:a.npz", [0.5, 1.5, 2.25], "3 distinct real-valued targets from 0.5 to 2.25"),
        ("iris", [0.0, 1.0, 2.0], "3 distinct integer targets from 0 to 2"),
        ("npz:b.npz", [1.0, 2.0, 2.0], "two target values, 1 and 2"),
        ("npz:c.npz", [1.0, 1.0], "one target value, 1"),
        ("synthetic:0:50x3", [0.5, 1.5], "two target values"),  # all on one side of 0
    ],
)
def test_logistic_refuses_targets_that_are_not_two_classes(
    data: str, targets: list[float], words: str
) -> None:
    from continuized.gossip.problems.specs import check_targets

    with pytest.raises(ConfigError, match=rf"'logistic:0.1' needs two classes .*{data}.* {words}"):
        check_targets("logistic:0.1", data, targets)


@pytest.mark.parametrize(
    ("spec", "data", "targets"),
    [
        ("logistic:0.1", "breast-cancer", [0.0, 1.0, 1.0]),
        ("logistic:0.1", "svmlight:a9a", [-1.0, 1.0]),
        ("logistic:0.1", "synthetic:0:50x3", [-0.3, 1.2, 0.7]),  # cut at 0 by design
        ("ridge:0.1", "diabetes", [151.0, 75.0]),
        ("quadratic", "", []),
    ],
)
def test_targets_a_problem_can_use_pass(spec: str, data: str, targets: list[float]) -> None:
    from continuized.gossip.problems.specs import check_targets

    check_targets(spec, data, targets)
