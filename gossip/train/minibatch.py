"""One node's local optimizer on its own shard: the gradient step a live node takes.

The simulator (:mod:`gossip.train.trainer`) and a live node draw a node's mini-batches from the
same stream, :func:`~gossip.train.clocks.node_stream`, in the order of that node's gradient
steps, and step with the same heavy-ball rule (:class:`~gossip.train.workers.Sgd`): the k-th
step of node v sees the same rows in both. Sans-IO: the caller passes ``x`` (the node's
parameters at the step's time) and applies the step it gets back; the times of the steps come
from :func:`gradient_times`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError
from continuized.gossip.train.models import Model
from continuized.gossip.train.trainset import Labelled
from continuized.gossip.train.workers import Sgd

__all__ = ["LocalSgd", "gradient_times"]

_GRADIENT_CLOCK = 3  # the purpose word of a node's gradient clock stream (gossip.train.clocks)
_BATCH = 1024  # gaps drawn at once: a numpy call per step would cost more than the draw


class LocalSgd:
    """Node ``v``'s mini-batch SGD (with momentum) on its own shard.

    Parameters
    ----------
    model : Model
        The model (its ``loss_and_grad``).
    shard : Labelled
        This node's rows, and only these.
    stream : numpy.random.Generator
        The node's mini-batch stream (:func:`~gossip.train.clocks.node_stream`).
    sgd : Sgd
        Learning rate and momentum.
    batch_size : int
        Rows per mini-batch, drawn with replacement as the simulator does.

    Examples
    --------
    >>> from continuized.gossip.train import make_problem, node_stream
    >>> p = make_problem("cycle:3", "softmax", "iris", "iid:0", lr=0.5, momentum=0.0)
    >>> sgd = LocalSgd(p.model, p.data.shards[0], node_stream(0, 0), p.sgd, batch_size=8)
    >>> x = p.initial(0, 0)[0]
    >>> step = sgd.step(x)
    >>> step.shape == x.shape, sgd.steps
    (True, 1)
    """

    def __init__(
        self,
        model: Model,
        shard: Labelled,
        stream: np.random.Generator,
        sgd: Sgd,
        batch_size: int,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"--batch-size must be an integer >= 1, got {batch_size}")
        if shard.m == 0:
            raise ConfigError("this node's shard has no rows; use a split that gives every node")
        self.model, self.shard, self.stream = model, shard, stream
        self.sgd, self.batch_size = sgd, batch_size
        self._buffer: NDArray[Any] | None = None
        self.steps = 0  # gradient steps taken (draws from the stream, in order)
        self.last_loss = float("nan")  # the mini-batch loss of the last step

    def step(self, x: NDArray[Any]) -> NDArray[Any]:
        """Return the step ``lr * direction`` for parameters ``x`` (to subtract from x and z).

        ``direction`` is the mini-batch gradient, or the momentum buffer ``m = momentum m + g``.
        With ``lr = 0`` the rows are still drawn (the stream stays in step with the simulator's),
        and the step is 0.
        """
        rows = self.stream.integers(self.shard.m, size=self.batch_size)
        self.steps += 1
        if self.sgd.lr == 0:
            return np.zeros_like(x)
        params = np.asarray(x, dtype=self.model.dtype)
        loss, grad = self.model.loss_and_grad(params, (self.shard.A[rows], self.shard.y[rows]))
        self.last_loss = float(loss)
        direction = grad
        if self.sgd.momentum > 0:
            if self._buffer is None:
                self._buffer = np.zeros_like(grad)
            self._buffer *= self.sgd.momentum
            self._buffer += grad
            direction = self._buffer
        out: NDArray[Any] = self.sgd.lr * np.asarray(direction, dtype=np.float64)
        return out


def gradient_times(seed: int, node: int, run: int = 0, start: float = 0.0) -> Iterator[float]:
    """Yield node ``node``'s gradient clock, a Poisson process of rate 1 per unit of t, after
    ``start``.

    Its stream is ``SeedSequence(seed, spawn_key=(run, 3, node))``: its own, apart from the
    mini-batch stream, so that the batches do not depend on when the steps fall.

    Examples
    --------
    >>> times = gradient_times(0, 2)
    >>> a, b = next(times), next(times)
    >>> 0 < a < b
    True
    """
    rng = np.random.default_rng(
        np.random.SeedSequence(seed, spawn_key=(run, _GRADIENT_CLOCK, node))
    )
    t = start
    while True:
        for gap in rng.exponential(1.0, size=_BATCH).tolist():
            t += gap
            yield t
