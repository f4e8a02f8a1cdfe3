"""A training run's node side: its own shard, its model and its gradient clock.

The Bootstrap of a training run names the model, the data, the split and the seeds
(:class:`gossip.wire.schema.Bootstrap`); the node cuts the data as the simulator does and keeps
only its own shard (the others and the test rows are dropped at once), and draws its
mini-batches from its own stream (:class:`gossip.train.minibatch.LocalSgd`). ``gossip node
--data SPEC`` replaces the data source, as for an optimization run.

:func:`learn` runs the node's gradient clock: each step at its time, late but never dropped,
in time order with the node's jumps.

The Bootstrap does not carry the model: the node draws its own initial model by the
simulator's rule (:func:`initial_model`), so a model of any size starts the same bits as
``gossip train``'s run 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError
from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.vocabulary import TimeBase
from continuized.gossip.model.parameters import ParameterLedger
from continuized.gossip.wire.schema import Bootstrap

if TYPE_CHECKING:  # the trainer's imports take seconds: only a training node pays them
    from continuized.gossip.train.minibatch import LocalSgd

__all__ = ["Learning", "initial_model", "learn", "load_learner"]

_STEP_WAIT = 0.002
"""Seconds between two looks at a gradient step that waits for the node's exchange to settle."""


class Learning(Protocol):
    """What the gradient clock reads of its node (:class:`node.daemon.Node`), and counts."""

    gradient_steps: int

    @property
    def boot(self) -> Bootstrap: ...
    @property
    def exchanger(self) -> Exchanger: ...
    @property
    def timebase(self) -> TimeBase: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def restarted(self) -> bool: ...


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
    from continuized.gossip.train.clocks import node_stream
    from continuized.gossip.train.minibatch import LocalSgd
    from continuized.gossip.train.models import parse_model
    from continuized.gossip.train.trainset import load_trainset
    from continuized.gossip.train.workers import Sgd

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
    from continuized.gossip.train.trainer import node_initial

    start = node_initial(learner.model, boot.seed, 0, boot.node_id, boot.init == "per-node")
    if start.size != boot.dim:  # load_learner checked the model: this is a user model's
        raise ConfigError(
            f"model {boot.train!r} drew {start.size} initial parameters, but the cluster's "
            f"has d = {boot.dim}"
        )
    return start


async def learn(node: Learning, learner: LocalSgd) -> None:
    """Run ``node``'s gradient clock until cancelled; raise what a step raised.

    A step at t reads x(t) from the ledger and moves x and z by the same ``-lr
    direction`` (:meth:`~gossip.model.parameters.ParameterLedger.add_local`); the trace
    reads its grid times before t first, as before a jump. As with the
    exchange ticks, a late step is taken late, never dropped: the node's stream of
    mini-batches stays the simulator's.
    """
    from continuized.gossip.train.minibatch import gradient_times

    ledger = node.exchanger.ledger
    assert isinstance(ledger, ParameterLedger)
    loop = asyncio.get_running_loop()
    failed: asyncio.Future[None] = loop.create_future()
    times = gradient_times(node.boot.seed, node.boot.node_id)
    timer: asyncio.TimerHandle | None = None
    # A restarted node does not take the steps before it came back (its state comes from its
    # neighbours' ledgers); a fresh node whose model loaded after t = 0 takes its first
    # steps late, at once, as the simulator's node took them.
    now_t = max(0.0, node.timebase.t(node.clock())) if node.restarted else 0.0
    t = next(times)
    while t < now_t:
        t = next(times)

    def arm(t: float) -> None:
        nonlocal timer
        delay = node.timebase.wall(t) - node.clock()
        timer = loop.call_later(max(delay, 0.0), fire, t)

    def fire(t: float) -> None:
        nonlocal timer
        try:
            ex = node.exchanger
            if ex.open and ex.pending:
                # A jump of ours is on its way, and may fall before t: the step waits for
                # it (a round trip at most), so that it sees x(t) with every jump before
                # t, and the trace's grid times stay exact.
                timer = loop.call_later(_STEP_WAIT, fire, t)
                return
            if ex.open:
                # A step fired late, after a jump at a later time, is taken at that jump's
                # time: the node's history stays in time order, as for a late exchange.
                at = max(t, ex.last_jump_time)
                moves = learner.sgd.lr > 0  # lr 0: the batch is drawn, nothing moves
                if moves and ex.trace is not None:  # grid times before the step: final
                    ex.trace.before_jump(ledger, at)
                x, _ = ledger.state_values(at)
                step = learner.step(x)
                if moves:
                    ledger.add_local(step)
                node.gradient_steps += 1
            arm(next(times))
        except Exception as exc:  # a loop callback's error would only be logged
            if not failed.done():
                failed.set_exception(exc)

    arm(t)
    try:
        await failed
    finally:
        if timer is not None:
            timer.cancel()
