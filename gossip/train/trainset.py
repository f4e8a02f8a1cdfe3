"""The rows of a training run: per-node shards, the whole training set, and a held-out test set.

The test rows are held out first (seeded), then the training rows are cut into shards by a split
of :mod:`gossip.datasets.splits`. Targets must be class labels (integers); they are renumbered
``0 .. classes - 1``. Arrays are stored in the model's dtype once, so no event converts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.datasets.sources import node_file, read_rows
from continuized.gossip.datasets.splits import holdout_rows, split_rows
from continuized.gossip.errors import ConfigError

__all__ = ["Labelled", "TrainSet", "load_trainset"]


@dataclass(frozen=True, eq=False)
class Labelled:
    """Features ``A`` (rows x features, the model's dtype) and integer labels ``y``."""

    A: NDArray[Any]
    y: NDArray[np.intp]

    @property
    def m(self) -> int:
        """Number of rows."""
        return int(self.A.shape[0])


@dataclass(frozen=True, eq=False)
class TrainSet:
    """Each node's shard, the union of the shards, the test set, and a description."""

    shards: tuple[Labelled, ...]
    train: Labelled
    test: Labelled
    classes: int
    description: str

    @property
    def features(self) -> int:
        """Number of input features."""
        return int(self.train.A.shape[1])


def load_trainset(
    data: str, split: str, n: int, test_fraction: float = 0.2, seed: int = 0, dtype: str = "float64"
) -> TrainSet:
    """Read ``data``, hold out ``test_fraction`` of its rows (seeded), split the rest over ``n``.

    Examples
    --------
    >>> ts = load_trainset("iris", "iid:0", 3)
    >>> ts.classes, ts.train.m + ts.test.m, len(ts.shards)
    (3, 150, 3)
    """
    if node_file(data) is not None:
        raise ConfigError(
            f"data set {data!r}: per-node CSV directories are not supported for training; "
            "give a whole data set (digits, wine, iris, breast-cancer, npz:PATH, ...)"
        )
    rows = read_rows(data)
    b = rows.b
    if rows.A.ndim != 2 or b.shape != (rows.A.shape[0],):
        raise ConfigError(
            f"data set {data!r}: features must be (m, d) and targets (m,), got "
            f"{rows.A.shape} and {b.shape}"
        )
    if not np.all(b == np.round(b)):
        raise ConfigError(
            f"data set {data!r}: training needs class labels (integer targets), but its targets "
            "are real numbers; use a classification set such as digits, wine or iris"
        )
    values, labels = np.unique(b, return_inverse=True)
    if len(values) < 2:
        raise ConfigError(f"data set {data!r}: needs at least 2 classes, got {len(values)}")
    if len(values) > max(2, len(b) // 5):
        # Integer targets with this many values (diabetes: 214 for 442 rows) are a regression.
        raise ConfigError(
            f"data set {data!r}: {len(values)} distinct targets for {len(b)} rows look like a "
            "regression target, not class labels; use a classification set such as digits, "
            "wine or iris"
        )
    train_rows, test_rows = holdout_rows(len(b), test_fraction, seed)
    parts, how = split_rows(split, labels[train_rows].astype(np.float64), n)
    kind = np.dtype(dtype)

    def take(idx: NDArray[np.intp]) -> Labelled:
        return Labelled(np.ascontiguousarray(rows.A[idx], dtype=kind), labels[idx].astype(np.intp))

    shards = tuple(take(train_rows[p]) for p in parts)
    text = f"{rows.description}; {len(test_rows)} test rows held out; {how}"
    return TrainSet(shards, take(train_rows), take(test_rows), len(values), text)
