"""Data sets cut into per-node shards (one node holds one :class:`Shard`)."""

from gossip.datasets.shard import Shard

__all__ = ["Shard"]
