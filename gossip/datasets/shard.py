"""One node's private data: a :class:`Shard` of rows ``(A, b)``.

A shard is the only data a node ever holds: a live node builds its problem from its own shard
(:func:`gossip.problems.make_local_problem`); only the simulator and the central check see all
of them at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from continuized.gossip.errors import ConfigError

__all__ = ["FloatArray", "Shard"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class Shard:
    """Rows held by one node: features ``A``, shape ``(m, d)``, and targets ``b``, shape ``(m,)``.

    Construct with :meth:`of`, which converts, copies and validates (``m >= 1``, finite values,
    matching lengths). ``name`` says where the rows came from, for error messages.

    Examples
    --------
    >>> s = Shard.of([[1.0, 2.0], [3.0, 4.0]], [0.5, -0.5])
    >>> s.m, s.dim
    (2, 2)
    """

    A: FloatArray
    b: FloatArray
    name: str = "shard"

    @classmethod
    def of(cls, A: ArrayLike, b: ArrayLike, name: str = "shard") -> Shard:
        """Validated float64 copies of ``A`` (2-D) and ``b`` (1-D, one target per row)."""
        feats = np.array(A, dtype=np.float64, copy=True)
        targets = np.array(b, dtype=np.float64, copy=True)
        if feats.ndim == 1:
            feats = feats[:, None]
        if feats.ndim != 2 or targets.ndim != 1:
            raise ConfigError(
                f"{name}: A must be 2-D (rows x features) and b 1-D, got shapes "
                f"{feats.shape} and {targets.shape}"
            )
        if feats.shape[0] == 0:
            raise ConfigError(f"{name}: empty shard (0 rows); every node needs at least 1 row")
        if feats.shape[1] == 0:
            raise ConfigError(f"{name}: shard has 0 features; need at least 1 column")
        if feats.shape[0] != targets.shape[0]:
            raise ConfigError(
                f"{name}: {feats.shape[0]} rows of features but {targets.shape[0]} targets; "
                "they must be equal"
            )
        bad = ~np.isfinite(feats).all(axis=1) | ~np.isfinite(targets)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ConfigError(
                f"{name}: non-finite value (NaN or inf) in row {row} "
                f"({int(bad.sum())} bad rows); all data must be finite"
            )
        feats.setflags(write=False)
        targets.setflags(write=False)
        return cls(feats, targets, name)

    @property
    def m(self) -> int:
        """Number of rows."""
        return int(self.A.shape[0])

    @property
    def dim(self) -> int:
        """Number of features ``d``."""
        return int(self.A.shape[1])
