"""The compiled kernel's own random streams (gossip.sim.streams) against NumPy's, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.gossip.sim.events import run_generator

pytest.importorskip("numba")

from numba import njit

from continuized.gossip.sim.streams import (
    next_double,
    pcg_seed,
    seed_state,
    seed_words,
    standard_exponential,
)


@njit(cache=False)
def _draw(rng: np.ndarray, exponentials: int, uniforms: int) -> np.ndarray:
    out = np.empty(exponentials + uniforms)
    for i in range(exponentials):
        out[i] = standard_exponential(rng)
    for i in range(uniforms):
        out[exponentials + i] = next_double(rng)
    return out


def _seeded(seed: int, run: int) -> np.ndarray:
    rng = np.zeros(4, dtype=np.uint64)
    pcg_seed(seed_state(seed_words(seed), run), rng)
    return rng


# Seeds and runs of one, two and more 32-bit words (SeedSequence pads the seed to its pool).
_BIG = st.one_of(st.integers(0, 2**32), st.integers(0, 2**140))


@settings(max_examples=60, deadline=None)
@given(seed=_BIG, run=st.one_of(st.integers(0, 3000), st.integers(2**32 - 2, 2**63 - 1)))
def test_seed_state_and_pcg_seed_are_numpys(seed: int, run: int) -> None:
    sequence = np.random.SeedSequence(seed, spawn_key=(run,))
    words = seed_state(seed_words(seed), run)
    np.testing.assert_array_equal(words, sequence.generate_state(4, np.uint64))
    rng = _seeded(seed, run)
    state = np.random.PCG64(sequence).state["state"]
    assert (int(rng[0]) << 64 | int(rng[1])) == state["state"]
    assert (int(rng[2]) << 64 | int(rng[3])) == state["inc"]


@settings(max_examples=10, deadline=None)
@given(seed=_BIG, run=st.integers(0, 10**6))
def test_draws_are_numpys_bit_for_bit(seed: int, run: int) -> None:
    # 200k exponentials take the ziggurat's rare branches (about 1.1%) thousands of times.
    got = _draw(_seeded(seed, run), 200_000, 50_000)
    gen = run_generator(seed, run)
    want = np.concatenate((gen.standard_exponential(200_000), gen.random(50_000)))
    np.testing.assert_array_equal(got, want)


def test_seed_words_split_like_seed_sequence() -> None:
    assert seed_words(0).tolist() == [0]
    assert seed_words(2**32 + 5).tolist() == [5, 1]
    assert seed_words(2**64 - 1).tolist() == [2**32 - 1, 2**32 - 1]
