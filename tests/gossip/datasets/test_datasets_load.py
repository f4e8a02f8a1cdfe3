"""Data sets and splits: every source, reproducibility, label skew, a node reading only its own
rows, the held-out test rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import dump_svmlight_file

from continuized.gossip.datasets import dadao_shards, load_node_shard, load_shards
from continuized.gossip.datasets.splits import holdout_rows, split_rows
from continuized.gossip.errors import ConfigError
from continuized.gossip.problems import make_problem_set


def test_bundled_sets_are_standardised() -> None:
    shards, text = load_shards("breast-cancer", "iid:0", 5)
    A = np.vstack([s.A for s in shards])
    assert A.shape == (569, 30)
    assert np.allclose(A.mean(axis=0), 0, atol=1e-12)
    assert np.allclose(A.std(axis=0), 1)
    assert "standardised" in text
    assert "iid:0" in text
    diabetes, _ = load_shards("diabetes", "iid:0", 4)
    assert sum(s.m for s in diabetes) == 442


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["iid", "label"]), st.integers(0, 1000), st.integers(1, 60))
def test_splits_are_reproducible_partitions(kind: str, seed: int, n: int) -> None:
    spec = f"{kind}:{seed}"
    one, _ = load_shards("synthetic:3:60x2", spec, n)
    two, _ = load_shards("synthetic:3:60x2", spec, n)
    assert len(one) == n
    assert all(s.m >= 1 for s in one)
    assert max(s.m for s in one) - min(s.m for s in one) <= 1
    for a, b in zip(one, two, strict=True):
        assert np.array_equal(a.A, b.A)
        assert np.array_equal(a.b, b.b)
    rows = np.vstack([s.A for s in one])
    full, _ = load_shards("synthetic:3:60x2", "iid:0", 1)
    # a partition: the same rows, each once
    assert np.array_equal(np.sort(rows, axis=0), np.sort(full[0].A, axis=0))


def test_label_split_is_heterogeneous() -> None:
    shards, text = load_shards("breast-cancer", "label:0", 4)
    assert "sorted by target" in text
    # sorted then cut: node 0 holds only class 0, node 3 only class 1
    assert set(shards[0].b.tolist()) == {0.0}
    assert set(shards[3].b.tolist()) == {1.0}
    assert [s.b.max() for s in shards] == sorted(s.b.max() for s in shards)


def test_a_node_loads_its_own_shard(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for v in range(3):
        np.savetxt(tmp_path / f"node-{v}.csv", rng.normal(size=(4 + v, 3)), delimiter=",")
    # another node's file is broken: a node must not read it
    (tmp_path / "node-2.csv").write_text("not,a,number\n")
    own = load_node_shard(f"csv:{tmp_path}", "iid:0", 3, 1)
    assert (own.m, own.dim) == (5, 2)
    with pytest.raises(ConfigError, match=r"node-2\.csv is not numeric CSV"):
        load_shards(f"csv:{tmp_path}", "iid:0", 3)
    # the same shard whether loaded alone or with every node
    same = load_node_shard("diabetes", "label:4", 5, 3)
    assert np.array_equal(same.A, load_shards("diabetes", "label:4", 5)[0][3].A)


def test_csv_dir_shards_of_the_wrong_width(tmp_path: Path) -> None:
    np.savetxt(tmp_path / "node-0.csv", np.ones((3, 3)), delimiter=",")
    np.savetxt(tmp_path / "node-1.csv", np.ones((3, 4)), delimiter=",")
    with pytest.raises(ConfigError, match=r"node 1 \(node-1.csv\) has 3 features but node 0 has 2"):
        load_shards(f"csv:{tmp_path}", "iid:0", 2)
    with pytest.raises(ConfigError, match=r"node 2 has no file node-2\.csv"):
        load_shards(f"csv:{tmp_path}", "iid:0", 3)


def test_csv_file_with_a_node_column(tmp_path: Path) -> None:
    path = tmp_path / "all.csv"
    rows = np.array([[1, 0.5, 1.0, 3.0], [0, 1.5, 2.0, 1.0], [1, -1.0, 0.0, 2.0]])
    np.savetxt(path, rows, delimiter=",")
    shards, text = load_shards(f"csv:{path}", "iid:9", 2)
    assert "node column" in text
    assert shards[0].A.tolist() == [[1.5, 2.0]]
    assert shards[1].b.tolist() == [3.0, 2.0]
    with pytest.raises(ConfigError, match=r"every id 0..2 \(missing \[2\]"):
        load_shards(f"csv:{path}", "iid:0", 3)


def test_svmlight_and_npz(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(20, 4)), rng.choice([-1.0, 1.0], size=20)
    dump_svmlight_file(X, y, str(tmp_path / "a.svm"))
    np.savez(tmp_path / "a.npz", X=X, y=y)
    svm, _ = load_shards(f"svmlight:{tmp_path / 'a.svm'}", "iid:1", 4)
    npz, _ = load_shards(f"npz:{tmp_path / 'a.npz'}", "iid:1", 4)
    for a, b in zip(svm, npz, strict=True):
        assert np.allclose(a.A, b.A)
        assert np.array_equal(a.b, b.b)
    np.savez(tmp_path / "bad.npz", features=X)
    with pytest.raises(ConfigError, match=r"needs arrays 'X' and 'y', found \['features'\]"):
        load_shards(f"npz:{tmp_path / 'bad.npz'}", "iid:0", 2)


def _bare_npy(path: Path) -> None:
    with path.open("wb") as fh:  # np.save(path) would add ".npy" to the name
        np.save(fh, np.zeros(3))


@pytest.mark.parametrize(
    ("write", "words"),
    [
        (lambda p: p.write_text("a,b\n1,2\n"), "is not an .npz file"),
        (lambda p: p.write_bytes(b"PK\x03\x04 not a zip"), "is not an .npz file"),
        (_bare_npy, r"holds one array \(.npy\), not an .npz"),
    ],
)
def test_a_file_that_is_not_an_npz_is_named_with_the_format_expected(
    tmp_path: Path, write: Callable[[Path], object], words: str
) -> None:
    path = tmp_path / "data.npz"
    write(path)
    with pytest.raises(ConfigError, match=rf"{path}.*{words}.*'X' \(m, d\) and 'y'"):
        load_shards(f"npz:{path}", "iid:0", 2)


def test_non_finite_data_is_named(tmp_path: Path) -> None:
    X = np.ones((6, 2))
    X[4, 1] = np.nan
    np.savez(tmp_path / "nan.npz", X=X, y=np.ones(6))
    with pytest.raises(ConfigError, match="non-finite value"):
        load_shards(f"npz:{tmp_path / 'nan.npz'}", "iid:0", 1)


@pytest.mark.parametrize(
    ("data", "split", "n", "match"),
    [
        ("mnist", "iid:0", 2, "unknown data set 'mnist'; valid data sets"),
        ("breast-cancer", "random:0", 2, "unknown split 'random:0'; valid splits"),
        ("breast-cancer", "iid:x", 2, "SEED must be an integer >= 0, got 'x'"),
        ("synthetic:1:5x2", "iid:0", 6, "5 rows cannot give 6 nodes"),
        ("synthetic:one", "iid:0", 2, "synthetic:SEED:ROWSxDIM"),
        ("svmlight:/no/such/file", "iid:0", 2, "no such file or directory '/no/such/file'"),
        ("breast-cancer", "iid:0", 0, "n = 0"),
    ],
)
def test_bad_data_specs(data: str, split: str, n: int, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_shards(data, split, n)


def test_dadao_setting() -> None:
    shards = dadao_shards(0)
    assert len(shards) == 10
    assert all((s.m, s.dim) == (100, 2) for s in shards)
    assert np.array_equal(dadao_shards(0)[3].b, shards[3].b)
    # each worker has its own slope in U(0.01, 5): least squares recovers distinct slopes
    slopes = [np.linalg.lstsq(s.A, s.b, rcond=None)[0][0] for s in shards]
    assert len({round(float(a), 6) for a in slopes}) == 10
    assert make_problem_set("logistic:1", shards).mu == 1.0
    assert make_problem_set("ridge:0", shards).mu > 0


@pytest.mark.parametrize(
    ("name", "shape", "classes"),
    [("digits", (1797, 64), 10), ("wine", (178, 13), 3), ("iris", (150, 4), 3)],
)
def test_bundled_classification_sets(name: str, shape: tuple[int, int], classes: int) -> None:
    shards, text = load_shards(name, "iid:0", 3)
    A = np.vstack([s.A for s in shards])
    b = np.concatenate([s.b for s in shards])
    assert A.shape == shape
    assert len(np.unique(b)) == classes
    assert np.allclose(A.mean(axis=0), 0, atol=1e-12)
    assert f"{classes} classes" in text


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(["dirichlet:0.1", "dirichlet:5", "shards:1", "shards:3"]),
    st.integers(0, 1000),
    st.integers(1, 20),
)
def test_label_skew_splits_are_reproducible_partitions(kind: str, seed: int, n: int) -> None:
    labels = np.repeat(np.arange(5.0), 12)
    one, _ = split_rows(f"{kind}:{seed}", labels, n)
    two, _ = split_rows(f"{kind}:{seed}", labels, n)
    assert len(one) == n
    assert all(len(p) >= 1 for p in one)
    assert np.array_equal(np.sort(np.concatenate(one)), np.arange(60))
    for a, b in zip(one, two, strict=True):
        assert np.array_equal(a, b)


def test_small_dirichlet_alpha_skews_labels() -> None:
    labels = np.repeat(np.arange(10.0), 100)
    skewed, text = split_rows("dirichlet:0.1:0", labels, 10)
    even, _ = split_rows("dirichlet:100:0", labels, 10)

    def classes_held(parts: list[np.ndarray]) -> float:
        # mean number of classes that make up 90% of a node's rows
        counts = []
        for p in parts:
            share = np.sort(np.bincount(labels[p].astype(int), minlength=10))[::-1] / len(p)
            counts.append(int(np.searchsorted(np.cumsum(share), 0.9)) + 1)
        return float(np.mean(counts))

    assert classes_held(skewed) < 4 < classes_held(even)
    assert "Dirichlet(0.1)" in text
    shards, how = split_rows("shards:2:0", labels, 10)
    assert all(len(np.unique(labels[p])) <= 2 for p in shards)
    assert "2 per node" in how


def test_holdout_and_bad_split_specs() -> None:
    train, test = holdout_rows(100, 0.25, 3)
    assert (len(train), len(test)) == (75, 25)
    assert not set(train) & set(test)
    assert np.array_equal(holdout_rows(100, 0.25, 3)[1], test)
    for spec, words in [
        ("dirichlet:0:0", "ALPHA must be"),
        ("dirichlet:x", "ALPHA must be"),
        ("shards:0:1", "K must be"),
        ("shards:50:1", "K must be"),
        ("dirichlet:1:-2", "SEED must be"),
    ]:
        with pytest.raises(ConfigError, match=words):
            split_rows(spec, np.repeat(np.arange(3.0), 10), 4)
    with pytest.raises(ConfigError, match="test fraction"):
        holdout_rows(10, 1.0, 0)
