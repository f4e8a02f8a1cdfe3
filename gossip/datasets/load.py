"""From specs to shards: the whole network's (:func:`load_shards`) or one node's own.

A live node calls :func:`load_node_shard`: with ``csv:DIR`` it reads only its own file; with a
whole data set it reads the set and keeps its own rows (the split is seeded, so every node cuts
the same way).
"""

from __future__ import annotations

import numpy as np

from continuized.gossip.datasets.shard import Shard
from continuized.gossip.datasets.sources import Rows, node_file, read_node_file, read_rows
from continuized.gossip.datasets.splits import split_rows
from continuized.gossip.errors import ConfigError

__all__ = ["dadao_shards", "load_node_shard", "load_shards"]


def _check_widths(shards: list[Shard], spec: str) -> list[Shard]:
    for s in shards:
        if s.dim != shards[0].dim:
            raise ConfigError(
                f"data set {spec!r}: {s.name} has {s.dim} features but node 0 has "
                f"{shards[0].dim}; every shard must have the same width"
            )
    return shards


def _by_node_column(rows: Rows, spec: str, n: int) -> list[Shard]:
    assert rows.nodes is not None
    present = np.unique(rows.nodes)
    if present.max() >= n or len(present) != n:
        missing = sorted(set(range(n)) - set(present.tolist()))
        extra = sorted(int(v) for v in present if v >= n)
        raise ConfigError(
            f"data set {spec!r}: node column must hold every id 0..{n - 1} "
            f"(missing {missing[:5]}, out of range {extra[:5]})"
        )
    return [
        Shard.of(rows.A[rows.nodes == v], rows.b[rows.nodes == v], name=f"node {v}")
        for v in range(n)
    ]


def load_shards(data: str, split: str, n: int) -> tuple[list[Shard], str]:
    """The ``n`` shards of data set ``data`` cut by ``split``, and a one-line description.

    ``csv:FILE`` (node column) and ``csv:DIR`` are already split: ``split`` is then ignored.
    """
    if n < 1:
        raise ConfigError(f"need at least 1 node, got n = {n}")
    directory = node_file(data)
    if directory is not None:
        shards = _check_widths([read_node_file(directory, v) for v in range(n)], data)
        total = sum(s.m for s in shards)
        return shards, f"csv:{directory}: {n} node files, {total} rows x {shards[0].dim}"
    rows = read_rows(data)
    if rows.A.ndim != 2 or rows.b.shape != (rows.A.shape[0],):
        raise ConfigError(
            f"data set {data!r}: features must be (m, d) and targets (m,), got "
            f"{rows.A.shape} and {rows.b.shape}"
        )
    if rows.nodes is not None:
        shards = _by_node_column(rows, data, n)
        return shards, f"{rows.description}, split by its node column"
    parts, how = split_rows(split, rows.b, n)
    shards = [Shard.of(rows.A[p], rows.b[p], name=f"node {v}") for v, p in enumerate(parts)]
    return shards, f"{rows.description}; {how}"


def load_node_shard(data: str, split: str, n: int, v: int) -> Shard:
    """Node ``v``'s own shard (of ``n``), as :func:`load_shards` would give it."""
    if not 0 <= v < n:
        raise ConfigError(f"node id must be in [0, {n}), got {v}")
    directory = node_file(data)
    if directory is not None:
        return read_node_file(directory, v)
    return load_shards(data, split, n)[0][v]


def dadao_shards(seed: int, workers: int = 10, samples: int = 1000) -> list[Shard]:
    """The DADAO paper's synthetic linear regression setting, seeded.

    ``workers`` nodes share ``samples`` rows equally; node ``v`` draws ``x ~ N(0, 1)``, a slope
    ``a_v ~ U(0.01, 5)`` of its own, and targets ``y = a_v x + 10 N(0, 1)``; its feature rows
    are ``(x, 1)`` (slope and intercept: dimension 2). ``ridge:0`` on them is linear regression,
    ``logistic:1`` the L2-logistic task on the signs of ``y`` (``mu = 1``).
    """
    if workers < 1 or samples < workers:
        raise ConfigError(
            f"DADAO setting: need 1 <= workers <= samples, got {workers} and {samples}"
        )
    rng = np.random.default_rng(seed)
    shards = []
    for v, m in enumerate(len(p) for p in np.array_split(np.arange(samples), workers)):
        slope = rng.uniform(0.01, 5.0)
        x = rng.standard_normal(m)
        y = slope * x + 10.0 * rng.standard_normal(m)
        shards.append(Shard.of(np.column_stack([x, np.ones(m)]), y, name=f"worker {v}"))
    return shards
