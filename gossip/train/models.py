"""Models a node trains: softmax regression, an MLP, or the user's own, on flat parameters.

==================  ===========================================================================
``softmax``         multinomial logistic regression: ``logits = A W + b``
``mlp:H``           one hidden ReLU layer of ``H`` units
``mlp:H1:H2``       two hidden ReLU layers
``module:callable`` the user's model: ``callable(features, classes, seed)`` returns
                    ``(params, loss_and_grad)`` or ``(params, loss_and_grad, predict)``;
                    a callable with a parameter ``rng`` is called with ``rng=`` a seeded
                    :class:`numpy.random.Generator` too, and draws its ``params`` from it
==================  ===========================================================================

A user's callable that takes ``rng`` draws each initial model from the generator it receives:
the run's initial stream, as the built-in models do, so ``--init per-node`` gives each node its
own start (:func:`gossip.train.trainer.initial_models`). Without ``rng`` every initial model
is the ``params`` of the first call (drawn from ``seed``): one start for all nodes, and
``--init per-node`` is refused (:func:`check_init`).

A model's parameters are one flat vector (float32 or float64), so that gossip averages and
mixes them as it does any vector. Gradients are written by hand (NumPy, no autodiff); the loss
is the mean softmax cross-entropy of a mini-batch ``(A, y)`` with integer labels ``y``. A
user's module is found in the working directory first, as ``python -m`` would find it
(:mod:`gossip.datasets.user_code`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.datasets.user_code import load_callable
from continuized.gossip.errors import ConfigError

__all__ = ["MODEL_KINDS", "Model", "Network", "UserModel", "check_init", "parse_model"]

MODEL_KINDS = ("softmax", "mlp:H", "mlp:H1:H2", "module:callable")

Params = NDArray[Any]
LossAndGrad = Callable[[Params, tuple[NDArray[Any], NDArray[np.intp]]], tuple[float, Params]]
Predict = Callable[[Params, NDArray[Any]], NDArray[Any]]
Factory = Callable[..., Any]


class Model(Protocol):
    """What the trainer needs of a model (see :class:`Network` and :class:`UserModel`)."""

    @property
    def description(self) -> str:
        """One line for the user."""
        ...

    @property
    def dtype(self) -> np.dtype[Any]:
        """The parameters' dtype (float32 or float64)."""
        ...

    def initial(self, rng: np.random.Generator) -> Params:
        """Return fresh initial parameters drawn with ``rng``."""
        ...

    def loss_and_grad(
        self, params: Params, batch: tuple[NDArray[Any], NDArray[np.intp]]
    ) -> tuple[float, Params]:
        """Return the mean loss on ``batch = (A, y)`` and its gradient (same shape as params)."""
        ...

    def predict(self, params: Params, features: NDArray[Any]) -> NDArray[Any] | None:
        """Return the predicted label of each row, or None if the model cannot say."""
        ...


@dataclass(frozen=True)
class Network:
    """A fully connected ReLU network ending in a softmax (no hidden layer: softmax regression).

    Parameters are ``W_1, b_1, ..., W_L, b_L`` flattened in that order, ``W_k`` of shape
    ``(fan_in, fan_out)``. Initial weights are ``N(0, 2 / fan_in)`` (He) on hidden layers and
    ``N(0, 1 / fan_in)`` on the output layer; biases start at 0.

    Examples
    --------
    >>> net = Network(4, (8,), 3, np.dtype(np.float64))
    >>> net.dim  # 4 * 8 + 8 + 8 * 3 + 3
    67
    """

    features: int
    hidden: tuple[int, ...]
    classes: int
    dtype: np.dtype[Any]

    @property
    def sizes(self) -> tuple[int, ...]:
        """Layer widths, input to output."""
        return (self.features, *self.hidden, self.classes)

    @property
    def dim(self) -> int:
        """Number of parameters."""
        s = self.sizes
        return sum(s[k] * s[k + 1] + s[k + 1] for k in range(len(s) - 1))

    @property
    def description(self) -> str:
        """One line for the user."""
        kind = "softmax regression" if not self.hidden else "MLP " + "-".join(map(str, self.sizes))
        return f"{kind}, {self.dim} parameters, {self.dtype}"

    def _layers(self, params: Params) -> list[tuple[Params, Params]]:
        # Views into the flat vector: no copy, and a gradient written here lands in place.
        out, at, s = [], 0, self.sizes
        for k in range(len(s) - 1):
            w = params[at : at + s[k] * s[k + 1]].reshape(s[k], s[k + 1])
            at += s[k] * s[k + 1]
            out.append((w, params[at : at + s[k + 1]]))
            at += s[k + 1]
        return out

    def initial(self, rng: np.random.Generator) -> Params:
        """Return He-initialised weights and zero biases, drawn with ``rng``."""
        params = np.zeros(self.dim, dtype=self.dtype)
        layers = self._layers(params)
        for k, (w, _) in enumerate(layers):
            gain = 1.0 if k == len(layers) - 1 else 2.0
            w[...] = rng.standard_normal(w.shape) * math.sqrt(gain / w.shape[0])
        return params

    def logits(self, params: Params, features: NDArray[Any]) -> NDArray[Any]:
        """Return the output layer's scores, one row per row of ``features``."""
        h = features
        layers = self._layers(params)
        for k, (w, b) in enumerate(layers):
            h = h @ w + b
            if k < len(layers) - 1:
                np.maximum(h, 0, out=h)
        return h

    def loss_and_grad(
        self, params: Params, batch: tuple[NDArray[Any], NDArray[np.intp]]
    ) -> tuple[float, Params]:
        """Return the mean cross-entropy on ``batch`` and its gradient.

        Backpropagation: with ``P = softmax(logits)`` the output error is ``(P - onehot(y)) / B``;
        each layer passes back ``delta W^T`` masked by its ReLU.
        """
        features, labels = batch
        layers = self._layers(params)
        acts = [features]
        for k, (w, b) in enumerate(layers):
            z = acts[-1] @ w + b
            acts.append(np.maximum(z, 0) if k < len(layers) - 1 else z)
        logits = acts[-1]
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        total = exp.sum(axis=1, keepdims=True)
        rows = np.arange(len(labels))
        loss = float(np.mean(np.log(total[:, 0]) - shifted[rows, labels]))
        delta = exp / total
        delta[rows, labels] -= 1
        delta /= len(labels)
        grad = np.empty_like(params)
        for k in range(len(layers) - 1, -1, -1):
            gw, gb = self._layers(grad)[k]
            np.matmul(acts[k].T, delta, out=gw)
            gb[...] = delta.sum(axis=0)
            if k:
                delta = (delta @ layers[k][0].T) * (acts[k] > 0)
        return loss, grad

    def predict(self, params: Params, features: NDArray[Any]) -> NDArray[Any]:
        """Return the arg-max class of each row."""
        return np.asarray(np.argmax(self.logits(params, features), axis=1))


@dataclass(frozen=True)
class UserModel:
    """A model given as ``module:callable`` (see the module docstring for the contract).

    ``factory`` is the user's callable when it takes ``rng`` (it then draws every initial
    model), else ``None`` (every initial model is ``start``).
    """

    description: str
    dtype: np.dtype[Any]
    start: Params
    loss_grad: LossAndGrad
    predictor: Predict | None
    factory: Callable[[np.random.Generator], Params] | None = None

    @property
    def draws_initial(self) -> bool:
        """Whether the user's callable draws its initial parameters from a given ``rng``."""
        return self.factory is not None

    def initial(self, rng: np.random.Generator) -> Params:
        """Return initial parameters: drawn by the user's callable from ``rng`` if it takes
        one, else the user's own (drawn from its seed), the same for every call."""
        if self.factory is None:
            return self.start.copy()
        return self.factory(rng)

    def loss_and_grad(
        self, params: Params, batch: tuple[NDArray[Any], NDArray[np.intp]]
    ) -> tuple[float, Params]:
        """Call the user's ``loss_and_grad`` and check what comes back."""
        loss, grad = self.loss_grad(params, batch)
        grad = np.asarray(grad, dtype=self.dtype)
        if grad.shape != params.shape:
            raise ConfigError(
                f"model {self.description}: loss_and_grad returned a gradient of shape "
                f"{grad.shape}, expected {params.shape} like the parameters"
            )
        return float(loss), grad

    def predict(self, params: Params, features: NDArray[Any]) -> NDArray[Any] | None:
        """Call the user's ``predict`` if it gave one, else None (accuracy unknown)."""
        return None if self.predictor is None else np.asarray(self.predictor(params, features))


def _hidden(spec: str, arg: str) -> tuple[int, ...]:
    parts = arg.split(":") if arg else []
    try:
        sizes = tuple(int(p) for p in parts)
    except ValueError:
        sizes = ()
    if not 1 <= len(sizes) <= 2 or min(sizes) < 1:
        raise ConfigError(
            f"model {spec!r}: expected mlp:H or mlp:H1:H2 with widths >= 1, e.g. mlp:64"
        )
    return sizes


def _takes_rng(factory: Factory) -> bool:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature: no rng
        return False
    rng = params.get("rng")
    return rng is not None and rng.kind in (rng.POSITIONAL_OR_KEYWORD, rng.KEYWORD_ONLY)


def _made(spec: str, made: Any, dtype: np.dtype[Any]) -> tuple[Params, LossAndGrad, Predict | None]:
    """Check what the user's callable returned: ``(params, loss_and_grad[, predict])``."""
    if not isinstance(made, tuple) or len(made) not in (2, 3) or not callable(made[1]):
        raise ConfigError(
            f"model {spec!r}: the callable must return (params, loss_and_grad) or "
            "(params, loss_and_grad, predict)"
        )
    start = np.asarray(made[0], dtype=dtype).ravel().copy()
    if start.size == 0 or not np.isfinite(start).all():
        raise ConfigError(f"model {spec!r}: the initial parameters must be finite and non-empty")
    return start, made[1], made[2] if len(made) == 3 else None


def _user(spec: str, features: int, classes: int, dtype: np.dtype[Any], seed: int) -> UserModel:
    factory = load_callable(spec, "model", others="valid models: " + ", ".join(MODEL_KINDS))
    takes_rng = _takes_rng(factory)
    extra: dict[str, Any] = {"rng": np.random.default_rng(seed)} if takes_rng else {}
    try:
        made = factory(features, classes, seed, **extra)
    except TypeError as exc:
        raise ConfigError(
            f"model {spec!r}: the callable must take (features, classes, seed) ({exc})"
        ) from None
    start, loss_grad, predictor = _made(spec, made, dtype)
    draw = None
    if takes_rng:

        def draw(rng: np.random.Generator) -> Params:
            params = _made(spec, factory(features, classes, seed, rng=rng), dtype)[0]
            if params.shape != start.shape:
                raise ConfigError(
                    f"model {spec!r}: the callable returned {params.size} parameters for one "
                    f"rng and {start.size} for another; the size must not depend on rng"
                )
            return params

    return UserModel(
        f"{spec}, {start.size} parameters, {dtype}", dtype, start, loss_grad, predictor, draw
    )


def check_init(model: Model, per_node: bool) -> None:
    """Refuse ``--init per-node`` for a user's model that cannot draw its own initial models.

    Raises
    ------
    ConfigError
        ``per_node`` and ``model`` is a :class:`UserModel` whose callable takes no ``rng``:
        every node would start from the same model, silently.
    """
    if per_node and isinstance(model, UserModel) and not model.draws_initial:
        raise ConfigError(
            f"--init per-node: model {model.description.partition(',')[0]!r} cannot draw one "
            "initial model per node: its callable takes no rng; give it a keyword parameter "
            "rng (a numpy Generator to draw params from), or use --init common"
        )


def parse_model(
    spec: str, features: int, classes: int, dtype: str = "float64", seed: int = 0
) -> Model:
    """Return the model of ``spec`` for ``features`` inputs and ``classes`` outputs.

    Examples
    --------
    >>> parse_model("mlp:64", 64, 10).description
    'MLP 64-64-10, 4810 parameters, float64'
    """
    if dtype not in ("float32", "float64"):
        raise ConfigError(f"--dtype must be float32 or float64, got {dtype!r}")
    kind = np.dtype(dtype)
    if features < 1 or classes < 2:
        raise ConfigError(
            f"a classifier needs >= 1 feature and >= 2 classes, got {features} and {classes}"
        )
    name, _, arg = spec.strip().partition(":")
    if name == "softmax" and not arg:
        return Network(features, (), classes, kind)
    if name == "mlp":
        return Network(features, _hidden(spec, arg), classes, kind)
    if arg and name not in ("softmax", "mlp"):
        return _user(spec.strip(), features, classes, kind, seed)
    raise ConfigError(f"unknown model {spec!r}; valid models: " + ", ".join(MODEL_KINDS))
