"""A training run's node side: its own shard, its model and its gradient clock.

The Bootstrap of a training run names the model, the data, the split and the seeds
(:class:`gossip.wire.schema.Bootstrap`); the node cuts the data as the simulator does and keeps
only its own shard (the others and the test rows are dropped at once), and draws its
mini-batches from its own stream (:class:`gossip.train.minibatch.LocalSgd`). ``gossip node
--data SPEC`` replaces the data source, as for an optimization run.

The Bootstrap does not carry the model: the node draws its own initial model by the
simulator's rule (:func:`initial_model`), so a model of any size starts the same bits as
``gossip train``'s run 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from gossip.errors import ConfigError
from gossip.wire.schema import Bootstrap

if TYPE_CHECKING:  # the trainer's imports take seconds: only a training node pays them
    from gossip.train.minibatch import LocalSgd

__all__ = ["initial_model", "load_learner"]


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


def initial_model(boot: Bootstrap, learner: LocalSgd) -> NDArray[Any]:
    """Return this node's initial model: the Bootstrap's ``initial_value`` if it carries one
    (an earlier coordinator's), else the node's own draw, row ``node_id`` of the simulator's
    run 0 (:func:`gossip.train.trainer.node_initial`, ``init`` per-node or common).

    Raises
    ------
    ConfigError
        The model drawn is not of the cluster's ``d`` parameters.
    """
    if boot.initial_value:
        return np.asarray(boot.initial_value, dtype=np.float64)
    from gossip.train.trainer import node_initial

    start = node_initial(learner.model, boot.seed, 0, boot.node_id, boot.init == "per-node")
    if start.size != boot.dim:  # load_learner checked the model: this is a user model's
        raise ConfigError(
            f"model {boot.train!r} drew {start.size} initial parameters, but the cluster's "
            f"has d = {boot.dim}"
        )
    return start
