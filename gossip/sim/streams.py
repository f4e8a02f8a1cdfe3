"""NumPy's per-run random streams, re-implemented for numba: SeedSequence, PCG64, two draws.

Theory of operation
-------------------
A run's generator is ``Generator(PCG64(SeedSequence(seed, spawn_key=(run,))))``
(:func:`gossip.sim.events.run_generator`). Building one in Python costs about 20 us (the
SeedSequence hashing), and calling it from numba goes through a function pointer per draw; for
runs of a few thousand activations that is a sizeable share of the work. So the compiled kernel
builds and draws the same streams itself, bit for bit:

* :func:`seed_state` is SeedSequence's entropy pool (O'Neill's ``seed_seq`` hash mixing of the
  seed's and the spawn key's 32-bit words) and ``generate_state(4, uint64)``;
* :func:`pcg_seed` and :func:`pcg_next` are PCG64 (XSL-RR 128/64): a 128-bit LCG, seeded as
  ``pcg64_set_seed`` does, with the 128-bit multiply emitted directly as LLVM ``i128``;
* :func:`next_double` and :func:`standard_exponential` are NumPy's ``random()`` (53 high bits)
  and its ziggurat exponential, with the ziggurat tables numba ships for its own ``Generator``.

The tests compare every piece with NumPy's own generator for many seeds and runs. This module
imports numba at the top: only :mod:`gossip.sim.compiled` imports it, lazily.

The draws are inlined into the kernel, and numba's on-disk cache of a function is keyed by its
own file only: after editing this module, touch ``gossip/sim/kernel.py`` too (or remove the
``*.nbi``/``*.nbc`` files of ``gossip/sim/__pycache__``), or the kernel keeps the old draws.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic
from numba.np.random._constants import fe_double, ke_double, we_double, ziggurat_exp_r
from numpy.typing import NDArray

__all__ = [
    "next_double",
    "pcg_next",
    "pcg_seed",
    "seed_state",
    "seed_words",
    "standard_exponential",
]

_M32 = np.uint64(0xFFFFFFFF)
_INIT_A = np.uint64(0x43B0D7E5)
_MULT_A = np.uint64(0x931E8875)
_INIT_B = np.uint64(0x8B51F9DD)
_MULT_B = np.uint64(0x58F38DED)
_MIX_L = np.uint64(0xCA01F9DD)
_MIX_R = np.uint64(0x4973F715)
_POOL = 4  # SeedSequence's default pool size, in 32-bit words
_PCG_MULT = (2549297995355413924 << 64) + 4865540595714422341  # PCG's 128-bit default multiplier

_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U3 = np.uint64(3)
_U8 = np.uint64(8)
_U11 = np.uint64(11)
_U16 = np.uint64(16)
_U32 = np.uint64(32)
_U58 = np.uint64(58)
_U63 = np.uint64(63)
_U64 = np.uint64(64)
_UFF = np.uint64(0xFF)
_TO_DOUBLE = 1.0 / 9007199254740992.0  # 2**-53

_KE = np.asarray(ke_double, dtype=np.uint64)
_WE = np.asarray(we_double, dtype=np.float64)
_FE = np.asarray(fe_double, dtype=np.float64)
_EXP_R = float(ziggurat_exp_r)


def seed_words(value: int) -> NDArray[np.uint64]:
    """Split an integer ``>= 0`` into 32-bit words, least significant first, as SeedSequence does
    (0 is one word, 0)."""
    words = []
    while value:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
    return np.array(words or [0], dtype=np.uint64)


def _typed_mul_add_128(typingctx: Any, hi: Any, lo: Any, inc_hi: Any, inc_lo: Any) -> Any:
    """``(hi, lo) * PCG_MULT + (inc_hi, inc_lo)`` modulo 2**128, as one LLVM i128 multiply-add."""
    u64: Any = types.uint64
    pair: Any = types.UniTuple
    sig = pair(u64, 2)(u64, u64, u64, u64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        wide = ir.IntType(128)
        shift = ir.Constant(wide, 64)

        def join(h: Any, low: Any) -> Any:
            return builder.or_(builder.shl(builder.zext(h, wide), shift), builder.zext(low, wide))

        state = builder.mul(join(args[0], args[1]), ir.Constant(wide, _PCG_MULT))
        state = builder.add(state, join(args[2], args[3]))
        half = ir.IntType(64)
        out_lo = builder.trunc(state, half)
        out_hi = builder.trunc(builder.lshr(state, shift), half)
        return context.make_tuple(builder, signature.return_type, [out_hi, out_lo])

    return sig, codegen


_mul_add_128: Any = intrinsic(_typed_mul_add_128)


@njit(cache=True, inline="always")
def _hashmix(value: np.uint64, hash_const: np.uint64) -> tuple[np.uint64, np.uint64]:
    value = (value ^ hash_const) & _M32
    hash_const = (hash_const * _MULT_A) & _M32
    value = (value * hash_const) & _M32
    return value ^ (value >> _U16), hash_const


@njit(cache=True, inline="always")
def _mix(x: np.uint64, y: np.uint64) -> np.uint64:
    result = ((_MIX_L * x) - (_MIX_R * y)) & _M32
    return result ^ (result >> _U16)


@njit(cache=True)
def seed_state(seed: NDArray[np.uint64], run: int) -> NDArray[np.uint64]:
    """``SeedSequence(seed, spawn_key=(run,)).generate_state(4, np.uint64)``.

    ``seed`` holds the seed's 32-bit words (:func:`seed_words`); ``run >= 0``.
    """
    run_u = np.uint64(run)
    n_run = 1 if run_u <= _M32 else 2
    # The seed's words, padded to the pool size (a spawn key is present), then the run's words.
    n_seed = max(seed.shape[0], _POOL)
    entropy = np.zeros(n_seed + n_run, dtype=np.uint64)
    entropy[: seed.shape[0]] = seed
    entropy[n_seed] = run_u & _M32
    if n_run == 2:
        entropy[n_seed + 1] = run_u >> _U32
    pool = np.zeros(_POOL, dtype=np.uint64)
    hash_const = _INIT_A
    for i in range(_POOL):
        pool[i], hash_const = _hashmix(entropy[i], hash_const)
    for i_src in range(_POOL):
        for i_dst in range(_POOL):
            if i_src != i_dst:
                mixed, hash_const = _hashmix(pool[i_src], hash_const)
                pool[i_dst] = _mix(pool[i_dst], mixed)
    for i_src in range(_POOL, entropy.shape[0]):
        for i_dst in range(_POOL):
            mixed, hash_const = _hashmix(entropy[i_src], hash_const)
            pool[i_dst] = _mix(pool[i_dst], mixed)
    out = np.zeros(4, dtype=np.uint64)
    hash_const = _INIT_B
    for i in range(8):
        value = (pool[i % _POOL] ^ hash_const) & _M32
        hash_const = (hash_const * _MULT_B) & _M32
        value = (value * hash_const) & _M32
        value ^= value >> _U16
        if i % 2 == 0:
            out[i // 2] = value
        else:
            out[i // 2] |= value << _U32
    return out


@njit(cache=True)
def pcg_seed(words: NDArray[np.uint64], rng: NDArray[np.uint64]) -> None:
    """Seed PCG64 as ``PCG64(seed_sequence)`` does from ``words = generate_state(4, uint64)``.

    ``rng`` receives ``(state_hi, state_lo, inc_hi, inc_lo)``.
    """
    # pcg64_set_seed: initstate = (words[0], words[1]), initseq = (words[2], words[3]) (high
    # word first); inc = initseq << 1 | 1; step; state += initstate; step.
    inc_hi = (words[2] << _U1) | (words[3] >> _U63)
    inc_lo = (words[3] << _U1) | _U1
    hi, lo = _mul_add_128(_U0, _U0, inc_hi, inc_lo)
    lo2 = lo + words[1]
    carry = _U1 if lo2 < lo else _U0
    hi, lo = _mul_add_128(hi + words[0] + carry, lo2, inc_hi, inc_lo)
    rng[0] = hi
    rng[1] = lo
    rng[2] = inc_hi
    rng[3] = inc_lo


@njit(cache=True, inline="always")
def pcg_next(rng: NDArray[np.uint64]) -> np.uint64:
    """The next 64 random bits of PCG64 (step, then the XSL-RR output of the new state)."""
    hi: np.uint64
    lo: np.uint64
    hi, lo = _mul_add_128(rng[0], rng[1], rng[2], rng[3])
    rng[0] = hi
    rng[1] = lo
    value = hi ^ lo
    rot = hi >> _U58
    return (value >> rot) | (value << ((_U64 - rot) & _U63))


@njit(cache=True, inline="always")
def next_double(rng: NDArray[np.uint64]) -> float:
    """A uniform in [0, 1), as ``Generator.random()``: the 53 high bits of the next draw."""
    return float(pcg_next(rng) >> _U11) * _TO_DOUBLE


# Inlined: compiled out of line, this rare branch made every draw about 5 times slower
# (14.5 ns against 2.8 ns here, and the simulator 2.5 times slower), though only 1.1% take it.
@njit(cache=True, inline="always")
def _exponential_tail(rng: NDArray[np.uint64], idx: int, x: float) -> float:
    """The ziggurat's rare branches (about 1.1% of draws): the tail, or a wedge test."""
    while True:
        if idx == 0:
            return _EXP_R - math.log1p(-next_double(rng))
        if (_FE[idx - 1] - _FE[idx]) * next_double(rng) + _FE[idx] < math.exp(-x):
            return x
        bits = pcg_next(rng) >> _U3
        idx = int(bits & _UFF)
        bits >>= _U8
        x = float(bits) * _WE[idx]
        if bits < _KE[idx]:
            return x


@njit(cache=True, inline="always")
def standard_exponential(rng: NDArray[np.uint64]) -> float:
    """An exponential of mean 1, as ``Generator.standard_exponential()`` (NumPy's ziggurat)."""
    bits = pcg_next(rng) >> _U3
    idx = int(bits & _UFF)
    bits >>= _U8
    x: float = float(bits) * _WE[idx]
    if bits < _KE[idx]:
        return x  # 98.9% of draws
    return float(_exponential_tail(rng, idx, x))
