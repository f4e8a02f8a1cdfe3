"""The sweep compiled with numba: runs one after another, one activation per loop turn, O(1) each.

Theory of operation
-------------------
This is the same process as :mod:`gossip.sim.engine`, with the same random streams, written as a
scalar loop that numba compiles (:func:`gossip.sim.kernel.sweep_runs`,
``njit(cache=True, nogil=True)``):

* the activations of run r are those of :mod:`gossip.sim.events`: the run's own stream
  (``SeedSequence(seed, spawn_key=(r,))`` into PCG64, built and drawn inside the kernel by
  :mod:`gossip.sim.streams`, bit for bit NumPy's) gives, window by window, a batch of
  ``standard_exponential`` gaps (topped up by further batches if the window is not covered),
  then one uniform per activation of the window, turned into an edge by the alias table of
  :class:`~gossip.sim.events.EdgeSampler`; so the event stream is identical;
* plain gossip (``eta = c = 0``) keeps x and averages the two ends, operation for operation as
  the engine does;
* otherwise a node keeps, instead of (x, z), the pair ``s = x + z`` and
  ``q = (x - z) exp(2 eta (t - t_b))``, with one base time ``t_b`` per run. Mixing
  (:mod:`gossip.model.mixing`) leaves ``x + z`` alone and scales ``x - z`` by ``exp(-2 eta tau)``,
  so neither s nor q changes between activations, and no per-node ``last`` time is needed. An
  activation of {v, w} at time T computes ``E = exp(-2 eta (T - t_b))`` once for both ends,
  reads ``x = (s + q E) / 2`` at each, and applies the jump of :func:`gossip.model.jumps.edge_flow`
  (``dx = (x_w - x_v) / 2``, ``dz = c (x_w - x_v)`` into v, its negative into w), which moves
  s by ``(1/2 + c) gap`` and q by ``(1/2 - c) gap / E``. Once E falls below e^-30, every q is
  multiplied by E and ``t_b`` becomes T (O(n), about every ``15 / eta`` of t), so E never nears
  the float range. That is one exp per activation instead of two, and one per grid point
  instead of one per node;
* at a recorded grid time every node is read at it (``x = (s + q E)/2``) to measure
  ``sum_v 1/2 |x_v - mean|^2``; the state is kept.

The same trajectories, then, with a different rounding: the tests hold the two engines' distances
to the mean, ``sqrt(2 error)``, to 1e-12 of the values' size, for any seed and horizon. The error
itself is not compared relatively: near the float floor it is the square of a rounding.

One kernel call sweeps a group of whole runs (about :data:`EVENTS_PER_CALL` activations), so
Python costs nothing per run and progress is still reported as it goes. The runs are
independent, so separate blocks of runs may be swept by separate threads at once: the kernel
releases the GIL.

numba is optional: :func:`kernel_available` says whether it can be imported (and is not turned
off by ``GOSSIP_SIM_ENGINE=numpy``); :func:`gossip.sim.simulator.simulate` falls back to the NumPy
engine without it. numba compiles the kernel on its first call in a process, unless its on-disk
cache holds a build of the current source for this machine: :func:`kernel_compiles` says
beforehand which it will be (:func:`compiles_first`, for any of the package's kernels), so that
the command line can say why a first run waits.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError
from continuized.gossip.sim.engine import BlockSpec
from continuized.gossip.sim.events import EdgeSampler, chunk_bounds

__all__ = [
    "ENGINES",
    "EVENTS_PER_CALL",
    "compile_seconds",
    "compiles_first",
    "kernel_available",
    "kernel_compiles",
    "resolve_engine",
    "run_block_compiled",
]

ENGINES = ("auto", "compiled", "numpy")
"""The simulators' ``engine`` values: ``auto`` takes the compiled sweep where numba imports."""

FloatArray = NDArray[np.float64]

EVENTS_PER_CALL = 1 << 20
"""Activations (about) swept per kernel call: progress comes every few tens of milliseconds."""


_kernel: Callable[..., int] | None = None
_compile_lock = threading.Lock()
_compile_time: list[float] = []


def _load() -> Callable[..., int] | None:
    """Return the compiled kernel, or None if numba cannot be imported or is turned off.

    ``GOSSIP_SIM_ENGINE=numpy`` turns the compiled kernel off (the fallback's test uses it).
    """
    global _kernel
    if os.environ.get("GOSSIP_SIM_ENGINE", "").strip().lower() == "numpy":
        return None
    if _kernel is not None:
        return _kernel
    with _compile_lock:
        if _kernel is None:
            try:
                from continuized.gossip.sim.kernel import sweep_runs
            except ImportError:
                return None
            _kernel = sweep_runs
    return _kernel


def kernel_available() -> bool:
    """Whether the compiled kernel can run here: numba imports and is not turned off.

    The first call imports numba (about half a second), not the import of this module.
    """
    return _load() is not None


def resolve_engine(engine: str) -> bool:
    """Whether ``engine`` (one of :data:`ENGINES`) resolves to a compiled sweep here.

    Raises
    ------
    ConfigError
        An unknown engine, or ``"compiled"`` where numba cannot run.
    """
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "numpy":
        return False
    available = kernel_available()
    if engine == "compiled" and not available:
        raise ConfigError(
            "engine 'compiled' needs numba, which cannot be imported here (or "
            "GOSSIP_SIM_ENGINE=numpy turns it off): `pip install numba`, or use engine 'auto' "
            "or 'numpy'"
        )
    return available


def compiles_first(kernel: Any) -> bool:
    """Whether the next call of the numba dispatcher ``kernel`` compiles it.

    True when this process has neither compiled nor loaded it, and numba's on-disk cache (its
    index file, next to the source or in the user's cache folder) holds no build of the
    kernel's current source for this machine. A build for other argument types does count as
    cached: the package's kernels take one set of types. False where this cannot be told (not a
    dispatcher, no cache, or numba's private cache layout changed): the answer only decides
    whether to say that a run compiles, never how it runs.
    """
    if getattr(kernel, "overloads", None):  # compiled or loaded in this process already
        return False
    try:
        cache = kernel._cache
        index = cache._cache_file._load_index()  # {} if absent, stale or of another numba
        # (signature, machine, hash of the code): every part but the signature must match.
        wanted = cache._index_key(None, kernel.targetctx.codegen())[1:]
    except Exception:  # numba's private API may change: an unknown answer is "no"
        return False
    return not any(tuple(key[1:]) == wanted for key in index)


def kernel_compiles() -> bool:
    """Whether the first compiled sweep in this process compiles the kernel (numba's cache is
    cold for it); False if the sweep runs on NumPy here (:func:`kernel_available`)."""
    kernel = _load()
    return kernel is not None and compiles_first(kernel)


def compile_seconds() -> float | None:
    """Seconds the first kernel call took in this process (compiling or loading the cache)."""
    return _compile_time[0] if _compile_time else None


def run_block_compiled(spec: BlockSpec, report: Callable[[int], None] | None = None) -> FloatArray:
    """Simulate the block's runs with the compiled kernel: same result as ``engine.run_block``.

    Raises
    ------
    RuntimeError
        numba is not available (callers check :func:`kernel_available` first).
    """
    kernel = _load()
    if kernel is None:
        raise RuntimeError("the compiled kernel needs numba, which is not available")
    from continuized.gossip.sim.streams import seed_words  # numba imports: _load succeeded

    values = spec.initial.reshape(spec.n, -1)
    sampler = EdgeSampler.from_probs(spec.probs)
    chunks = chunk_bounds(spec.grid)
    bounds = np.array([(i0, i1) for i0, i1, _ in chunks], dtype=np.int64).reshape(-1, 2)
    errors = np.empty((spec.n_runs, int(spec.record.sum())), dtype=np.float64)
    fixed: tuple[Any, ...] = (
        seed_words(spec.seed),
        np.ascontiguousarray(values),
        np.ascontiguousarray(spec.edges[:, 0], dtype=np.int64),
        np.ascontiguousarray(spec.edges[:, 1], dtype=np.int64),
        sampler.accept,
        sampler.alias,
        sampler.uniform,
        spec.eta,
        spec.c,
        spec.grid,
        spec.record,
        bounds,
        np.array([s for _, _, s in chunks], dtype=np.float64),
        values.mean(axis=0),
    )
    span = float(spec.grid[-1]) if spec.grid.size else 0.0
    per_call = max(1, int(EVENTS_PER_CALL / max(span, 1.0)))
    for first in range(0, spec.n_runs, per_call):
        rows = errors[first : first + per_call]
        args = (fixed[0], spec.first_run + first, *fixed[1:], rows)
        if not _compile_time:
            began = time.perf_counter()
            done = kernel(*args)
            _compile_time.append(time.perf_counter() - began)
        else:
            done = kernel(*args)
        if report is not None:
            report(int(done))
    return errors
