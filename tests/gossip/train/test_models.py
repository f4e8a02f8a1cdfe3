"""Models: hand-written gradients against finite differences, dtypes, user models, bad specs."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError
from continuized.gossip.train import Model, parse_model


def params_size(model: Model) -> int:
    return int(model.initial(np.random.default_rng(0)).size)


def _numeric_grad(
    model: Model, params: NDArray[Any], batch: tuple[NDArray[Any], NDArray[Any]], eps: float = 1e-6
) -> NDArray[Any]:
    out = np.empty_like(params)
    for k in range(params.size):
        step = np.zeros_like(params)
        step[k] = eps
        up, _ = model.loss_and_grad(params + step, batch)
        down, _ = model.loss_and_grad(params - step, batch)
        out[k] = (up - down) / (2 * eps)
    return out


@settings(max_examples=25, deadline=None)
@given(
    spec=st.sampled_from(["softmax", "mlp:5", "mlp:4:3"]),
    features=st.integers(1, 4),
    classes=st.integers(2, 4),
    rows=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_gradient_matches_finite_differences(
    spec: str, features: int, classes: int, rows: int, seed: int
) -> None:
    model = parse_model(spec, features, classes)
    rng = np.random.default_rng(seed)
    # Random biases too: at zero biases a dead ReLU unit sits exactly on its kink.
    params = model.initial(rng) + 0.3 * rng.standard_normal(params_size(model))
    batch = (rng.standard_normal((rows, features)), rng.integers(classes, size=rows))
    loss, grad = model.loss_and_grad(params, batch)
    assert np.isfinite(loss)
    assert loss >= 0
    assert np.allclose(grad, _numeric_grad(model, params, batch), rtol=1e-4, atol=1e-6)


def test_float32_follows_float64() -> None:
    wide = parse_model("mlp:16:8", 6, 3, "float64")
    narrow = parse_model("mlp:16:8", 6, 3, "float32")
    rng = np.random.default_rng(1)
    params = wide.initial(rng)
    A, y = rng.standard_normal((10, 6)), rng.integers(3, size=10)
    l64, g64 = wide.loss_and_grad(params, (A, y))
    l32, g32 = narrow.loss_and_grad(params.astype(np.float32), (A.astype(np.float32), y))
    assert g32.dtype == np.float32
    assert narrow.initial(rng).dtype == np.float32
    assert abs(l32 - l64) < 1e-5
    assert np.allclose(g32, g64, atol=1e-5)


def test_shapes_and_prediction() -> None:
    model = parse_model("mlp:64", 64, 10)
    assert model.description == "MLP 64-64-10, 4810 parameters, float64"
    params = model.initial(np.random.default_rng(0))
    guess = model.predict(params, np.zeros((3, 64)))
    assert guess is not None
    assert guess.shape == (3,)
    assert parse_model("softmax", 4, 3).description.startswith("softmax regression, 15 parameters")


def test_user_model_from_examples() -> None:
    model = parse_model("examples.linear_svm_model:make", 4, 3, "float32", seed=5)
    params = model.initial(np.random.default_rng(0))
    assert params.dtype == np.float32
    assert params.shape == (15,)
    rng = np.random.default_rng(2)
    batch = (rng.standard_normal((8, 4)).astype(np.float32), rng.integers(3, size=8))
    loss, grad = model.loss_and_grad(params, batch)
    assert grad.shape == params.shape
    assert loss > 0
    guess = model.predict(params, batch[0])
    assert guess is not None
    assert guess.shape == (8,)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("mlp", "mlp:H"),
        ("mlp:0", "widths >= 1"),
        ("mlp:4:4:4", "mlp:H1:H2"),
        ("resnet", "valid models"),
        ("no_such_module:make", "no module 'no_such_module' in .* valid models"),
        ("examples.linear_svm_model:absent", "has no callable 'absent'"),
        ("mpl:6:4", "not module:callable.*valid models"),
        ("math:sqrt", "must take"),
        ("builtins:divmod", "must"),
    ],
)
def test_bad_model_specs_are_named(spec: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_model(spec, 4, 3)


def test_bad_dtype_is_named() -> None:
    with pytest.raises(ConfigError, match="float32 or float64"):
        parse_model("softmax", 4, 3, "float16")


_RNG_MODEL = '''
import numpy as np


def make(features, classes, seed, rng=None):
    """A softmax-sized linear model that draws its start from rng when given one."""
    draw = rng if rng is not None else np.random.default_rng(seed)
    start = draw.standard_normal(features * classes + classes)

    def loss_and_grad(params, batch):
        return float(params @ params), 2 * params

    return start, loss_and_grad


CALLS = []


def grows(features, classes, seed, rng):
    CALLS.append(seed)  # one parameter more at every call
    return rng.standard_normal(len(CALLS) + 1), lambda p, b: (0.0, 0 * p)
'''


@pytest.fixture
def rng_model(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The name of a user's model module (in the working directory) whose callable takes rng."""
    name = "trainfig_rng_model"
    (tmp_path / f"{name}.py").write_text(_RNG_MODEL)
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)  # the next test's folder holds another module of that name


def test_a_user_model_that_takes_rng_gives_each_node_its_own_start(rng_model: str) -> None:
    from continuized.gossip.train import make_problem

    per_node = make_problem("cycle:4", f"{rng_model}:make", "iris", "iid:0", per_node_init=True)
    starts = per_node.initial(0, 0)
    assert starts.shape == (4, 15)
    assert len({row.tobytes() for row in starts}) == 4
    # The same rule as the built-in models: node k's start is the (k + 1)-th draw of the run.
    common = make_problem("cycle:4", f"{rng_model}:make", "iris", "iid:0").initial(0, 0)
    assert (common == starts[0]).all()
    assert (make_problem("cycle:4", f"{rng_model}:make", "iris", "iid:0").initial(0, 1)
            != common).any()  # fmt: skip


def test_per_node_starts_of_a_user_model_without_rng_are_refused() -> None:
    from continuized.gossip.train import make_problem

    with pytest.raises(ConfigError, match=r"--init per-node: .*takes no rng.*--init common"):
        make_problem("cycle:4", "examples.linear_svm_model:make", "iris", "iid:0",
                     per_node_init=True)  # fmt: skip
    # A common start stays the callable's own, drawn from its seed, as before.
    common = make_problem("cycle:4", "examples.linear_svm_model:make", "iris", "iid:0", seed=3)
    assert len({row.tobytes() for row in common.initial(0, 0)}) == 1


def test_a_user_model_whose_size_depends_on_rng_is_refused(rng_model: str) -> None:
    model = parse_model(f"{rng_model}:grows", 4, 3)
    with pytest.raises(ConfigError, match="must not depend on rng"):
        model.initial(np.random.default_rng(0))
