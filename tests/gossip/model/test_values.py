"""Initial values from specs: shapes, seeds, files and every kind of bad spec."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from continuized.gossip.errors import ConfigError
from continuized.gossip.model.values import initial_values


def test_onehot_default_puts_one_at_node_zero() -> None:
    values = initial_values("onehot", 5)
    assert values.shape == (5,)
    assert values.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_onehot_k_and_vector_values() -> None:
    values = initial_values("onehot:3", 4, dim=2)
    assert values.shape == (4, 2)
    assert values[3].tolist() == [1.0, 1.0]
    assert values.sum() == 2.0


@pytest.mark.parametrize("kind", ["gaussian", "uniform"])
def test_random_specs_are_seeded(kind: str) -> None:
    a = initial_values(f"{kind}:7", 50, dim=3)
    b = initial_values(f"{kind}:7", 50, dim=3)
    c = initial_values(f"{kind}:8", 50, dim=3)
    assert a.shape == (50, 3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # Without a seed the default seed is used.
    np.testing.assert_array_equal(
        initial_values(kind, 10, rng_seed_default=7), initial_values(f"{kind}:7", 10)
    )


def test_uniform_is_in_unit_interval_and_gaussian_is_centred() -> None:
    u = initial_values("uniform:1", 10_000)
    assert u.min() >= 0.0
    assert u.max() < 1.0
    g = initial_values("gaussian:1", 10_000)
    assert abs(g.mean()) < 0.05
    assert abs(g.std() - 1.0) < 0.05


def test_file_scalars_and_vectors(tmp_path: Path) -> None:
    path = tmp_path / "v.txt"
    path.write_text("# values\n1.5\n\n-2  # comment\n3e-1\n")
    assert initial_values(f"file:{path}", 3).tolist() == [1.5, -2.0, 0.3]
    vec = tmp_path / "w.csv"
    vec.write_text("1, 2\n3,4\n")
    assert initial_values(f"file:{vec}", 2, dim=2).tolist() == [[1.0, 2.0], [3.0, 4.0]]


@pytest.mark.parametrize(
    ("spec", "n", "dim", "needle"),
    [
        ("zeros", 3, 1, "unknown initial values 'zeros'"),
        ("onehot:5", 3, 1, "node index must be in [0, 2]"),
        ("onehot:-1", 3, 1, "node index must be in [0, 2]"),
        ("onehot:x", 3, 1, "must be an integer, got 'x'"),
        ("gaussian:abc", 3, 1, "seed must be an integer"),
        ("uniform:-4", 3, 1, "seed must be >= 0"),
        ("file:", 3, 1, "missing path"),
        ("file:/nonexistent/values.txt", 3, 1, "cannot read"),
        ("onehot", 0, 1, "number of nodes"),
        ("onehot", 3, 0, "dimension"),
    ],
)
def test_bad_specs_name_the_value(spec: str, n: int, dim: int, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        initial_values(spec, n, dim=dim)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("text", "dim", "needle"),
    [
        ("1\n2\n", 1, "has 2 value(s), expected one per node (3)"),
        ("1\n2\nthree\n", 1, "line 3 is 'three'"),
        ("1\n2\ninf\n", 1, "not finite"),
        ("1,2\n3\n4,5\n", 2, "line 2 has 1 component(s), expected 2"),
    ],
)
def test_bad_files_name_the_line(tmp_path: Path, text: str, dim: int, needle: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        initial_values(f"file:{path}", 3, dim=dim)
    assert needle in str(info.value)
