"""Cutting a data set's rows into ``n`` shards, and holding rows out for a test set.

=========================  ========================================================================
``iid:SEED``               shuffle (seeded), cut into ``n`` near-equal parts: every shard looks
                           like the whole set
``label:SEED``             shuffle, sort stably by target, cut: each node sees a narrow range of
                           labels/targets (heterogeneous shards)
``dirichlet:ALPHA:SEED``   label skew: for each class, its rows go to the nodes in proportions
                           drawn from Dirichlet(ALPHA, ..., ALPHA) (small ALPHA: each node holds
                           few classes; large ALPHA: close to iid)
``shards:K:SEED``          sort by label, cut into ``n K`` shards, deal ``K`` random shards to each
                           node (the FedAvg "pathological non-iid" split)
=========================  ========================================================================

All are reproducible; every node gets at least one row (a node that Dirichlet leaves empty
takes one row from the largest node).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError

__all__ = ["SPLIT_KINDS", "holdout_rows", "split_rows"]

SPLIT_KINDS = ("iid:SEED", "label:SEED", "dirichlet:ALPHA:SEED", "shards:K:SEED")
_KINDS = ("iid", "label", "dirichlet", "shards")

Parts = list[NDArray[np.intp]]


def _seed(text: str, spec: str) -> int:
    try:
        seed = int(text) if text else 0
    except ValueError:
        raise ConfigError(f"split {spec!r}: SEED must be an integer >= 0, got {text!r}") from None
    if seed < 0:
        raise ConfigError(f"split {spec!r}: SEED must be an integer >= 0, got {seed}")
    return seed


def _dirichlet(b: NDArray[np.float64], n: int, alpha: float, rng: np.random.Generator) -> Parts:
    owner = np.empty(len(b), dtype=np.intp)
    for label in np.unique(b):
        rows = rng.permutation(np.flatnonzero(b == label))
        shares = rng.dirichlet(np.full(n, alpha))
        cuts = np.round(np.cumsum(shares)[:-1] * len(rows)).astype(np.intp)
        for v, part in enumerate(np.split(rows, cuts)):
            owner[part] = v
    counts = np.bincount(owner, minlength=n)
    # Dirichlet may leave a node with nothing; a node needs a row to take a gradient step.
    for empty in np.flatnonzero(counts == 0).tolist():
        donor = int(np.argmax(counts))
        owner[np.flatnonzero(owner == donor)[0]] = empty
        counts[donor] -= 1
        counts[empty] += 1
    return [np.flatnonzero(owner == v).astype(np.intp) for v in range(n)]


def _shards(b: NDArray[np.float64], n: int, k: int, rng: np.random.Generator) -> Parts:
    order = rng.permutation(len(b))
    order = order[np.argsort(b[order], kind="stable")]
    pieces = np.array_split(order, n * k)
    deal = rng.permutation(n * k).reshape(n, k)
    return [np.sort(np.concatenate([pieces[i] for i in deal[v]])).astype(np.intp) for v in range(n)]


def split_rows(spec: str, b: NDArray[np.float64], n: int) -> tuple[Parts, str]:
    """Row indices of each of the ``n`` shards, and a one-line description of the split.

    Examples
    --------
    >>> parts, _ = split_rows("dirichlet:0.5:0", np.repeat([0.0, 1.0], 10), 4)
    >>> sum(len(p) for p in parts), min(len(p) for p in parts) >= 1
    (20, True)
    """
    kind, _, arg = spec.strip().partition(":")
    kind = kind.lower()
    if kind not in _KINDS:
        raise ConfigError(f"unknown split {spec!r}; valid splits: " + ", ".join(SPLIT_KINDS))
    m = len(b)
    if n < 1 or m < n:
        raise ConfigError(
            f"split {spec!r}: {m} rows cannot give {n} nodes at least 1 row each; "
            f"use at most {m} nodes"
        )
    if kind == "dirichlet":
        alpha_text, _, seed_text = arg.partition(":")
        try:
            alpha = float(alpha_text)
        except ValueError:
            alpha = math.nan
        if not (math.isfinite(alpha) and alpha > 0):
            raise ConfigError(
                f"split {spec!r}: ALPHA must be a number > 0 (e.g. dirichlet:0.1:0), "
                f"got {alpha_text!r}"
            )
        seed = _seed(seed_text, spec)
        parts = _dirichlet(b, n, alpha, np.random.default_rng(seed))
        how = f"label skew Dirichlet({alpha:g})"
        kind = f"dirichlet:{alpha:g}"
    elif kind == "shards":
        k_text, _, seed_text = arg.partition(":")
        try:
            k = int(k_text)
        except ValueError:
            k = 0
        if k < 1 or n * k > m:
            raise ConfigError(
                f"split {spec!r}: K must be an integer with 1 <= K <= rows / nodes = {m // n} "
                f"(e.g. shards:2:0), got {k_text!r}"
            )
        seed = _seed(seed_text, spec)
        parts = _shards(b, n, k, np.random.default_rng(seed))
        how = f"sorted by label into {n * k} shards, {k} per node"
        kind = f"shards:{k}"
    else:
        seed = _seed(arg, spec)
        order = np.random.default_rng(seed).permutation(m)
        if kind == "label":
            order = order[np.argsort(b[order], kind="stable")]
        parts = [np.asarray(p, dtype=np.intp) for p in np.array_split(order, n)]
        how = "shuffled" if kind == "iid" else "sorted by target (heterogeneous)"
    sizes = [len(p) for p in parts]
    return parts, f"{kind}:{seed}: {m} rows {how}, {min(sizes)}-{max(sizes)} per node"


def holdout_rows(m: int, fraction: float, seed: int) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Return ``(train, test)`` row indices: a seeded ``fraction`` of the ``m`` rows held out.

    Examples
    --------
    >>> train, test = holdout_rows(10, 0.2, 0)
    >>> len(train), len(test), sorted(set(train) | set(test)) == list(range(10))
    (8, 2, True)
    """
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"the test fraction must be in (0, 1), got {fraction!r}")
    held = round(fraction * m)
    if held < 1 or held >= m:
        raise ConfigError(
            f"a test fraction of {fraction:g} of {m} rows leaves {held} test rows; "
            "it must leave at least one row on each side"
        )
    order = np.random.default_rng(seed).permutation(m)
    return np.sort(order[held:]).astype(np.intp), np.sort(order[:held]).astype(np.intp)
