"""A factory that returns something that is not a LocalProblem (for the error test)."""

from __future__ import annotations

from continuized.gossip.datasets import Shard


def not_a_problem(shard: Shard | None, node: int) -> object:
    """Returns the shard itself: it has ``dim`` but no ``grad_conjugate``."""
    return shard
