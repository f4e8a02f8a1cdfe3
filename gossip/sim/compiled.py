"""The sweep compiled with numba: one run at a time, one activation per loop turn, O(1) each.

Theory of operation
-------------------
This is the same process as :mod:`gossip.sim.engine`, with the same random streams and the same
arithmetic, written as a scalar loop that numba compiles (``njit(cache=True, nogil=True)``):

* the activations of run r are those of :mod:`gossip.sim.events`: the run's own generator
  (:func:`~gossip.sim.events.run_generator`) draws, window by window, a batch of
  ``standard_exponential`` gaps (topped up by further batches if the window is not covered),
  then one uniform per activation of the window, turned into an edge by the alias table of
  :class:`~gossip.sim.events.EdgeSampler`. numba's ``Generator`` shares the bit generator's
  state with NumPy's and draws the same numbers, so the event stream is identical;
* at an activation of {v, w} at time T, only v and w are mixed from their ``last`` to T with the
  closed form of :func:`gossip.mixing.mix` (``a + d exp(-2 eta tau)``, ``a - d exp(-2 eta tau)``)
  and take the jump of :func:`gossip.jumps.edge_flow` (``dx = (x_w - x_v) / 2``,
  ``dz = c (x_w - x_v)`` into v and its negative into w), operation for operation (SPEC 4);
* at a recorded grid time every node is mixed to it on the fly to measure
  ``sum_v 1/2 |x_v - mean|^2``, as :func:`gossip.sim.engine._error` does (the sum is sequential
  here, pairwise in NumPy: the two agree to rounding, about 1e-16 relative).

The runs are independent and each owns its generator, so separate runs may be swept by separate
threads at once: the kernel releases the GIL. A run is swept in pieces of a few windows so that
progress is reported as it goes.

numba is optional: :func:`kernel_available` says whether it can be imported (and is not turned
off by ``GOSSIP_SIM_ENGINE=numpy``); :func:`gossip.simulator.simulate` falls back to the NumPy
engine without it.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gossip.sim.engine import BlockSpec
from gossip.sim.events import _SPARE_SD, CHUNK_T, EdgeSampler, chunk_bounds, run_generator

__all__ = ["WINDOWS_PER_CALL", "compile_seconds", "kernel_available", "run_block_compiled"]

FloatArray = NDArray[np.float64]

WINDOWS_PER_CALL = 16
"""Windows (of CHUNK_T) swept per kernel call: progress comes about every 16k activations."""

_BATCH = max(1, int(CHUNK_T + _SPARE_SD * math.sqrt(CHUNK_T) + 16.0))  # as events.draw_chunk


def _sweep(  # the kernel takes plain arrays and scalars: numba compiles no objects
    gen: np.random.Generator,
    x: FloatArray,
    z: FloatArray,
    last: FloatArray,
    end_u: NDArray[np.int64],
    end_v: NDArray[np.int64],
    accept: FloatArray,
    alias: NDArray[np.int64],
    uniform: bool,
    eta: float,
    c: float,
    tracks_z: bool,
    sweep: FloatArray,
    record: NDArray[np.bool_],
    bounds: NDArray[np.int64],
    starts: FloatArray,
    first: int,
    stop: int,
    mean: FloatArray,
    errors: FloatArray,
    col: int,
) -> int:
    """Sweep windows ``first .. stop - 1`` of one run; return the activations simulated.

    ``x, z`` are ``(n, d)``; window w covers sweep points ``bounds[w, 0] .. bounds[w, 1] - 1``
    and starts at ``starts[w]``; recorded errors go to ``errors[col], errors[col + 1], ...``.
    """
    n, d = x.shape
    n_edges = accept.shape[0]
    rate = -2.0 * eta  # as gossip.mixing.decay: (-2 eta) tau
    times = np.empty(_BATCH, dtype=np.float64)
    events = 0
    for w in range(first, stop):
        start = starts[w]
        end = start + CHUNK_T
        # The gaps: batches of standard exponentials, each batch's cumulative sum added to the
        # last time so far (as events.draw_chunk), until the window is covered.
        count = 0
        base = start
        while True:
            if count + _BATCH > times.shape[0]:
                grown = np.empty(times.shape[0] + _BATCH, dtype=np.float64)
                grown[:count] = times[:count]
                times = grown
            acc = 0.0
            for k in range(_BATCH):
                acc += gen.standard_exponential()
                times[count + k] = base + acc
            count += _BATCH
            base = times[count - 1]
            if base >= end:
                break
        in_window = 0
        while in_window < count and times[in_window] < end:
            in_window += 1
        j = 0
        for i in range(bounds[w, 0], bounds[w, 1]):
            g = sweep[i]
            while j < in_window and times[j] <= g:
                t = times[j]
                u = gen.random()
                scaled = u * n_edges
                e = min(int(scaled), n_edges - 1)
                if not uniform and (scaled - e) >= accept[e]:
                    e = alias[e]
                a = end_u[e]
                b = end_v[e]
                if tracks_z:
                    fa = math.exp(rate * (t - last[a]))
                    fb = math.exp(rate * (t - last[b]))
                    for k in range(d):
                        hs = 0.5 * (x[a, k] + z[a, k])
                        hd = 0.5 * (x[a, k] - z[a, k]) * fa
                        xa = hs + hd
                        za = hs - hd
                        hs = 0.5 * (x[b, k] + z[b, k])
                        hd = 0.5 * (x[b, k] - z[b, k]) * fb
                        xb = hs + hd
                        zb = hs - hd
                        gap = xb - xa
                        x[a, k] = xa + 0.5 * gap
                        z[a, k] = za + c * gap
                        gap = xa - xb
                        x[b, k] = xb + 0.5 * gap
                        z[b, k] = zb + c * gap
                    last[a] = t
                    last[b] = t
                else:
                    for k in range(d):
                        xa = x[a, k]
                        xb = x[b, k]
                        x[a, k] = xa + 0.5 * (xb - xa)
                        x[b, k] = xb + 0.5 * (xa - xb)
                j += 1
                events += 1
            if record[i]:
                total = 0.0
                for v in range(n):
                    f = math.exp(rate * (g - last[v])) if tracks_z else 1.0
                    for k in range(d):
                        xv = x[v, k]
                        if tracks_z:
                            xv = 0.5 * (xv + z[v, k]) + 0.5 * (xv - z[v, k]) * f
                        gap = xv - mean[k]
                        total += gap * gap
                errors[col] = 0.5 * total
                col += 1
        # The window's remaining edge draws (after the horizon) keep the stream as NumPy's.
        for _ in range(j, in_window):
            gen.random()
    return events


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
    try:
        import numba
    except ImportError:
        return None
    with _compile_lock:
        if _kernel is None:
            _kernel = numba.njit(cache=True, nogil=True)(_sweep)
    return _kernel


def kernel_available() -> bool:
    """Whether the compiled kernel can run here: numba imports and is not turned off.

    The first call imports numba (about half a second), not the import of this module.
    """
    return _load() is not None


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
    n = spec.n
    values = spec.initial.reshape(n, -1)
    mean = values.mean(axis=0)
    tracks_z = spec.eta != 0.0 or spec.c != 0.0
    sampler = EdgeSampler.from_probs(spec.probs)
    end_u = np.ascontiguousarray(spec.edges[:, 0], dtype=np.int64)
    end_v = np.ascontiguousarray(spec.edges[:, 1], dtype=np.int64)
    chunks = chunk_bounds(spec.grid)
    bounds = np.array([(i0, i1) for i0, i1, _ in chunks], dtype=np.int64).reshape(-1, 2)
    starts = np.array([s for _, _, s in chunks], dtype=np.float64)
    # Column of errors[r] where window w's first recorded point goes.
    recorded_before = np.concatenate(([0], np.cumsum(spec.record)))
    errors = np.empty((spec.n_runs, int(spec.record.sum())), dtype=np.float64)
    for r in range(spec.n_runs):
        gen = run_generator(spec.seed, spec.first_run + r)
        x = values.copy()
        z = values.copy()
        last = np.zeros(n, dtype=np.float64)
        for first in range(0, len(chunks), WINDOWS_PER_CALL):
            stop = min(first + WINDOWS_PER_CALL, len(chunks))
            col = int(recorded_before[bounds[first, 0]])
            args: tuple[Any, ...] = (gen, x, z, last, end_u, end_v, sampler.accept)
            args += (sampler.alias, sampler.uniform, spec.eta, spec.c, tracks_z, spec.grid)
            args += (spec.record, bounds, starts, first, stop, mean, errors[r], col)
            if not _compile_time:
                began = time.perf_counter()
                done = kernel(*args)
                _compile_time.append(time.perf_counter() - began)
            else:
                done = kernel(*args)
            if report is not None:
                report(int(done))
    return errors
