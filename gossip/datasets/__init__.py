"""Data sets cut into per-node shards (one node holds one :class:`Shard`).

See :mod:`gossip.datasets.sources` for the data specs and :mod:`gossip.datasets.splits` for the
splits. :mod:`gossip.datasets.user_code` imports a user's own ``module:callable`` (a problem, a
model) from the folder they run in.
"""

from continuized.gossip.datasets.load import dadao_shards, load_node_shard, load_shards
from continuized.gossip.datasets.shard import Shard
from continuized.gossip.datasets.sources import DATA_KINDS
from continuized.gossip.datasets.splits import SPLIT_KINDS

__all__ = ["DATA_KINDS", "SPLIT_KINDS", "Shard", "dadao_shards", "load_node_shard", "load_shards"]
