"""What each algorithm does at an event: mass conservation, on-demand mixing, averaging."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError
from continuized.gossip.train import Sgd, Workers


def _start(n: int = 4, d: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d))


@settings(max_examples=40, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.floats(0.01, 2.0), st.integers(0, 3), st.integers(1, 3)),
        min_size=1,
        max_size=30,
    ),
    seed=st.integers(0, 1000),
)
def test_a2cid2_keeps_the_sum_of_x_and_of_x_tilde(
    events: list[tuple[float, int, int]], seed: int
) -> None:
    start = _start(seed=seed)
    w = Workers("a2cid2", start, Sgd(0.0), eta=0.3, alpha_tilde=1.7)
    t = 0.0
    for dt, i, shift in events:
        t += dt
        w.communicate(i, (i + shift) % 4, t)
    w.sync(t + 1.0)
    assert w.companion is not None
    # Jumps are antisymmetric across an edge and the mixing keeps x + x~ per node.
    assert np.allclose(w.x.sum(axis=0), start.sum(axis=0))
    assert np.allclose(w.companion.sum(axis=0), start.sum(axis=0))


@settings(max_examples=30, deadline=None)
@given(t1=st.floats(0.0, 5.0), t2=st.floats(0.0, 5.0))
def test_mixing_late_equals_mixing_on_time(t1: float, t2: float) -> None:
    lo, hi = sorted((t1, t2))
    once = Workers("a2cid2", _start(), Sgd(0.0), eta=0.4, alpha_tilde=1.0)
    twice = Workers("a2cid2", _start(), Sgd(0.0), eta=0.4, alpha_tilde=1.0)
    once.communicate(0, 1, 0.5)
    twice.communicate(0, 1, 0.5)
    twice.params_at(0, 0.5 + lo)
    assert np.allclose(once.params_at(0, 0.5 + hi), twice.params_at(0, 0.5 + hi))


def test_a2cid2_communication_jump() -> None:
    start = _start()
    w = Workers("a2cid2", start, Sgd(0.0), eta=0.0, alpha_tilde=2.0)
    w.communicate(0, 1, 1.0)
    assert w.companion is not None
    assert np.allclose(w.x[0], (start[0] + start[1]) / 2)
    assert np.allclose(w.x[1], w.x[0])
    assert np.allclose(w.companion[0], start[0] + 2.0 * (start[1] - start[0]))
    assert np.allclose(w.companion[1], start[1] - 2.0 * (start[1] - start[0]))


def test_gradient_step_moves_x_and_companion_with_momentum() -> None:
    start = _start()
    w = Workers("a2cid2", start, Sgd(0.5, momentum=0.5), eta=0.1, alpha_tilde=1.0)
    g = np.ones(3)
    w.params_at(2, 0.0)
    w.apply_gradient(2, g)
    w.apply_gradient(2, g)  # buffer: 1, then 0.5 * 1 + 1 = 1.5
    assert w.companion is not None
    assert np.allclose(w.x[2], start[2] - 0.5 * (1.0 + 1.5))
    assert np.allclose(w.companion[2], w.x[2])


def test_adpsgd_averages_and_local_does_nothing() -> None:
    start = _start()
    ad = Workers("adpsgd", start, Sgd(0.1))
    ad.communicate(1, 2, 3.0)
    assert np.allclose(ad.x[1], (start[1] + start[2]) / 2)
    assert np.allclose(ad.x[2], ad.x[1])
    assert np.allclose(ad.x[0], start[0])
    local = Workers("local", start, Sgd(0.1))
    local.communicate(1, 2, 3.0)
    assert np.array_equal(local.x, start)


def test_allreduce_keeps_every_node_on_the_mean() -> None:
    start = _start()
    w = Workers("allreduce", start, Sgd(0.2))
    mean = start.mean(axis=0)
    w.apply_gradient(3, np.ones(3))
    assert np.allclose(w.x, mean - 0.2 / 4)
    assert np.ptp(w.x, axis=0).max() == 0


@pytest.mark.parametrize(
    ("algorithm", "sgd", "words"),
    [
        ("dsgd", (0.1, 0.0), "valid algorithms"),
        ("local", (-1.0, 0.0), "--lr"),
        ("local", (0.1, 1.0), "--momentum"),
    ],
)
def test_bad_settings_are_named(algorithm: str, sgd: tuple[float, float], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        Workers(algorithm, _start(), Sgd(*sgd))
