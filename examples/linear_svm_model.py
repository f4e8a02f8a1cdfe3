"""A user-defined model for ``gossip train``: a multiclass linear SVM (Crammer-Singer hinge).

    loss(W, b) = 1/B sum_i max(0, 1 + max_{k != y_i} s_ik - s_iy_i) + lam/2 |W|^2,
    s = A W + b.

Run it from the repository root (``gossip`` finds ``examples/`` in the folder it runs from)::

    gossip train --model examples.linear_svm_model:make --data wine --graph cycle:8 --lr 0.05

The factory receives the number of features, the number of classes and the seed, and returns
``(params, loss_and_grad)`` or ``(params, loss_and_grad, predict)``: the initial parameters as
one flat vector, ``loss_and_grad(params, (A, y))`` giving the mean loss on a mini-batch and its
gradient, and ``predict(params, A)`` giving each row's label (without it the accuracy is
reported as unknown).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["make"]

Array = NDArray[Any]


def make(
    features: int, classes: int, seed: int, lam: float = 1e-3
) -> tuple[
    Array,
    Callable[[Array, tuple[Array, Array]], tuple[float, Array]],
    Callable[[Array, Array], Array],
]:
    """Return small random initial weights, the hinge loss with its subgradient, and argmax."""
    rng = np.random.default_rng(seed)
    cut = features * classes

    def split(params: Array) -> tuple[Array, Array]:
        return params[:cut].reshape(features, classes), params[cut:]

    def loss_and_grad(params: Array, batch: tuple[Array, Array]) -> tuple[float, Array]:
        A, y = batch
        W, b = split(params)
        scores = A @ W + b
        rows = np.arange(len(y))
        margins = 1.0 + scores - scores[rows, y][:, None]
        margins[rows, y] = -np.inf  # the true class is not a rival
        rival = np.argmax(margins, axis=1)
        worst = margins[rows, rival]
        active = worst > 0
        # Subgradient: +1 on the worst rival's score, -1 on the true one, where the margin bites.
        coeff = np.zeros_like(scores)
        coeff[rows[active], rival[active]] += 1.0
        coeff[rows[active], y[active]] -= 1.0
        coeff /= len(y)
        grad = np.concatenate([(A.T @ coeff + lam * W).ravel(), coeff.sum(axis=0)])
        loss = float(np.maximum(worst, 0).mean() + 0.5 * lam * np.sum(W * W))
        return loss, grad.astype(params.dtype)

    def predict(params: Array, A: Array) -> Array:
        W, b = split(params)
        return np.asarray(np.argmax(A @ W + b, axis=1))

    start = np.concatenate([0.01 * rng.standard_normal(cut), np.zeros(classes)])
    return start, loss_and_grad, predict
