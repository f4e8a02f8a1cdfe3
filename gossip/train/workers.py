"""The nodes' states during training, and what each algorithm does at an event.

=============  ===================================================================================
``a2cid2``     two vectors per node, ``x`` and ``x~``. Between events each pair follows
               ``d/dt (x, x~) = eta (x~ - x, x - x~)``, integrated in closed form on demand
               (:func:`gossip.model.mixing.mix`). A gradient step moves both by the same local step.
               A communication on ``{i, j}``: ``x~_i += alpha~ (x_j - x_i)``,
               ``x~_j += alpha~ (x_i - x_j)``, then ``x_i = x_j = (x_i + x_j) / 2``.
``adpsgd``     AD-PSGD: a communication averages the pair, ``x_i = x_j = (x_i + x_j) / 2``.
``local``      no communication at all (each node trains on its own shard).
``allreduce``  the ceiling: every gradient step is averaged over all nodes at once, so all
               nodes always hold the same model (communication events are ignored).
=============  ===================================================================================

The local optimizer is SGD with heavy-ball momentum as in PyTorch: ``m = momentum m + g``,
step ``lr m`` (``momentum = 0``: plain SGD). Each node keeps its own momentum buffer; gossip
never mixes it.

Only the nodes of an event are brought up to date (``t_last`` records when each node was last
mixed): the flow is exact, so mixing a node over ``[t_last, t]`` in one go equals mixing it at
every instant in between.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError
from continuized.gossip.model.mixing import mix

__all__ = ["ALGORITHMS", "Sgd", "Workers"]

ALGORITHMS = ("a2cid2", "adpsgd", "local", "allreduce")


@dataclass(frozen=True)
class Sgd:
    """The local optimizer: learning rate ``lr >= 0`` and momentum in ``[0, 1)``."""

    lr: float
    momentum: float = 0.0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.lr) and self.lr >= 0):
            raise ConfigError(f"--lr must be a finite number >= 0, got {self.lr!r}")
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError(f"--momentum must be in [0, 1), got {self.momentum!r}")


class Workers:
    """The ``n`` nodes' parameters (and companions, momentum buffers) under one algorithm.

    Parameters
    ----------
    algorithm : str
        One of :data:`ALGORITHMS`.
    initial : ndarray of shape (n, d)
        Each node's initial parameters (copied); ``x~`` starts equal to ``x``.
    sgd : Sgd
        The local optimizer.
    eta, alpha_tilde : float
        The A²CiD² constants (used by ``a2cid2`` only).
    """

    def __init__(
        self,
        algorithm: str,
        initial: NDArray[Any],
        sgd: Sgd,
        eta: float = 0.0,
        alpha_tilde: float = 0.0,
    ) -> None:
        if algorithm not in ALGORITHMS:
            raise ConfigError(
                f"unknown algorithm {algorithm!r}; valid algorithms: " + ", ".join(ALGORITHMS)
            )
        self.algorithm = algorithm
        self.x = np.array(initial, copy=True)
        if algorithm == "allreduce":
            self.x[:] = self.x.mean(axis=0)
        self.companion = self.x.copy() if algorithm == "a2cid2" else None
        self.buffers = np.zeros_like(self.x) if sgd.momentum > 0 else None
        self.t_last = np.zeros(len(self.x), dtype=np.float64)
        self.sgd, self.eta, self.alpha_tilde = sgd, eta, alpha_tilde

    @property
    def n(self) -> int:
        """Number of nodes."""
        return int(self.x.shape[0])

    def params_at(self, v: int, t: float) -> NDArray[Any]:
        """Bring node ``v`` to time ``t`` and return its parameters (a view: do not keep it)."""
        if self.companion is not None and t != self.t_last[v]:
            x, z = mix(self.x[v], self.companion[v], self.eta, t - self.t_last[v])
            self.x[v], self.companion[v] = x, z
        self.t_last[v] = t
        row: NDArray[Any] = self.x[v]
        return row

    def apply_gradient(self, v: int, grad: NDArray[Any]) -> None:
        """Take node ``v``'s local step with gradient ``grad`` (computed at its current ``x``)."""
        direction = grad
        if self.buffers is not None:
            self.buffers[v] *= self.sgd.momentum
            self.buffers[v] += grad
            direction = self.buffers[v]
        step = self.sgd.lr * direction
        if self.algorithm == "allreduce":
            # Averaging every node's step at once: all rows move by the mean step.
            self.x -= step / self.n
            return
        self.x[v] -= step
        if self.companion is not None:
            self.companion[v] -= step

    def communicate(self, i: int, j: int, t: float) -> None:
        """Apply a communication on edge ``{i, j}`` at time ``t``."""
        if self.algorithm in ("local", "allreduce"):
            return
        xi, xj = self.params_at(i, t), self.params_at(j, t)
        if self.companion is not None:
            pull = self.alpha_tilde * (xj - xi)
            self.companion[i] += pull
            self.companion[j] -= pull
        mean = 0.5 * (xi + xj)
        self.x[i] = mean
        self.x[j] = mean

    def sync(self, t: float) -> NDArray[Any]:
        """Bring every node to time ``t`` and return all parameters, shape ``(n, d)`` (a view)."""
        if self.companion is not None:
            tau = (t - self.t_last)[:, None]
            x, z = mix(self.x, self.companion, self.eta, tau)
            self.x[...], self.companion[...] = x, z
        self.t_last[:] = t
        return self.x
