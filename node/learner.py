"""A training run's node side: its own shard, its model and its gradient clock.

The Bootstrap of a training run names the model, the data, the split and the seeds
(:class:`gossip.wire.schema.Bootstrap`); the node cuts the data as the simulator does and keeps
only its own shard (the others and the test rows are dropped at once), and draws its
mini-batches from its own stream (:class:`gossip.train.minibatch.LocalSgd`). ``gossip node
--data SPEC`` replaces the data source, as for an optimization run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gossip.errors import ConfigError
from gossip.wire.schema import Bootstrap

if TYPE_CHECKING:  # the trainer's imports take seconds: only a training node pays them
    from gossip.train.minibatch import LocalSgd

__all__ = ["load_learner"]


def load_learner(boot: Bootstrap, data: str | None = None) -> LocalSgd:
    """Return this node's local optimizer on its own shard.

    Raises
    ------
    ConfigError
        The model, data source or split is unknown, the node's shard is empty, or the model's
        size is not the cluster's ``d`` (named, with the expected size).
    """
    if not boot.train:
        raise ConfigError("this cluster does not train a model (no --train)")
    from gossip.train.clocks import node_stream
    from gossip.train.minibatch import LocalSgd
    from gossip.train.models import parse_model
    from gossip.train.trainset import load_trainset
    from gossip.train.workers import Sgd

    source = data or boot.data
    # Cut exactly as the coordinator and the simulator do (same test rows, same split); keep
    # only this node's rows.
    trainset = load_trainset(source, boot.split, boot.n, 0.2, boot.seed, "float64")
    shard = trainset.shards[boot.node_id]
    model = parse_model(boot.train, trainset.features, trainset.classes, "float64", boot.seed)
    del trainset
    size = model.initial(node_stream(boot.seed, boot.node_id)).size  # a throw-away draw
    if size != boot.dim:
        raise ConfigError(
            f"model {boot.train!r} on this node's data {source!r} has {size} parameters, but "
            f"the cluster's has d = {boot.dim}; give every node data of the same width"
        )
    return LocalSgd(
        model,
        shard,
        node_stream(boot.seed, boot.node_id),
        Sgd(boot.lr, boot.momentum),
        boot.batch_size,
    )
