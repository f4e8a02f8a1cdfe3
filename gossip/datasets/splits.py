"""Cutting a data set's rows into ``n`` shards: ``iid:SEED`` or ``label:SEED``.

``iid:SEED`` shuffles the rows (seeded) and cuts them into ``n`` near-equal parts: every shard
looks like the whole set. ``label:SEED`` shuffles, then sorts stably by target and cuts: each
node sees a narrow range of labels/targets (heterogeneous shards, the hard case for
decentralized methods). Both are reproducible; every node gets at least one row.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from gossip.errors import ConfigError

__all__ = ["SPLIT_KINDS", "split_rows"]

SPLIT_KINDS = ("iid:SEED", "label:SEED")


def split_rows(spec: str, b: NDArray[np.float64], n: int) -> tuple[list[NDArray[np.intp]], str]:
    """Row indices of each of the ``n`` shards, and a one-line description of the split."""
    kind, _, arg = spec.strip().partition(":")
    kind = kind.lower()
    if kind not in ("iid", "label"):
        raise ConfigError(f"unknown split {spec!r}; valid splits: " + ", ".join(SPLIT_KINDS))
    try:
        seed = int(arg) if arg else 0
    except ValueError:
        raise ConfigError(f"split {spec!r}: SEED must be an integer >= 0, got {arg!r}") from None
    if seed < 0:
        raise ConfigError(f"split {spec!r}: SEED must be an integer >= 0, got {seed}")
    m = len(b)
    if n < 1 or m < n:
        raise ConfigError(
            f"split {spec!r}: {m} rows cannot give {n} nodes at least 1 row each; "
            f"use at most {m} nodes"
        )
    order = np.random.default_rng(seed).permutation(m)
    if kind == "label":
        order = order[np.argsort(b[order], kind="stable")]
    parts = [np.asarray(p, dtype=np.intp) for p in np.array_split(order, n)]
    sizes = [len(p) for p in parts]
    how = "shuffled" if kind == "iid" else "sorted by target (heterogeneous)"
    return parts, f"{kind}:{seed}: {m} rows {how}, {min(sizes)}-{max(sizes)} per node"
