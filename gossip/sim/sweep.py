"""Blocks of simulated runs swept in this process, in threads or in worker processes, with
progress counted in events.

Both simulators (gossip's :mod:`gossip.sim.simulator` and the optimizer's
:mod:`gossip.dual.simulate`) split their runs into blocks and sweep them one after the other
(:func:`run_blocks_inline`), with ``workers > 1`` in threads when a compiled kernel sweeps them
(it releases the GIL: :func:`run_blocks_in_threads`), or else in a pool of processes
(:func:`run_blocks_in_processes`). Each block function reports the
events it has simulated as it goes; the workers put those counts on one queue, which the
parent drains into ``progress`` while it waits.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.queues
import os
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from typing import TypeVar

__all__ = [
    "PARALLEL_EVENTS",
    "THREADED_EVENTS",
    "BlockRunner",
    "auto_workers",
    "run_blocks_in_processes",
    "run_blocks_in_threads",
    "run_blocks_inline",
]

Spec = TypeVar("Spec")
Result = TypeVar("Result")

BlockRunner = Callable[[Spec, Callable[[int], None]], Result]
"""``run(spec, report)``: sweep one block, calling ``report(events)`` as events are done.
It must be a module-level function (the workers import it by name)."""

PARALLEL_EVENTS = 2_000_000
"""Below this many events, worker processes cost more to start than they save."""

THREADED_EVENTS = 200_000
"""The same for a compiled kernel's threads, which start at once."""


def auto_workers(events: float, threaded: bool, blocks: int) -> int:
    """Workers for a job of about ``events`` events in at most ``blocks`` blocks, when the
    caller gave none: one per CPU (and per block) above the threshold of their kind
    (:data:`THREADED_EVENTS` for threads, :data:`PARALLEL_EVENTS` for processes), else 1."""
    threshold = THREADED_EVENTS if threaded else PARALLEL_EVENTS
    return max(1, min(os.cpu_count() or 1, blocks)) if events > threshold else 1


def run_blocks_inline(
    run: BlockRunner[Spec, Result],
    specs: Sequence[Spec],
    progress: Callable[[int], None] | None,
) -> list[Result]:
    """Return ``[run(spec, report) for spec in specs]``, computed here, one after the other;
    ``progress`` (if given) gets the total events done so far at each report."""
    done = 0

    def report(events: int) -> None:
        nonlocal done
        done += events
        if progress is not None:
            progress(done)

    return [run(spec, report) for spec in specs]


_worker_queue: multiprocessing.queues.Queue[int] | None = None


def _init_worker(q: multiprocessing.queues.Queue[int]) -> None:
    global _worker_queue
    _worker_queue = q


def _worker_report(events: int) -> None:
    if _worker_queue is not None:
        _worker_queue.put(events)


def _run_in_worker(run: BlockRunner[Spec, Result], spec: Spec) -> Result:
    return run(spec, _worker_report)


def run_blocks_in_processes(
    run: BlockRunner[Spec, Result],
    specs: Sequence[Spec],
    workers: int,
    progress: Callable[[int], None] | None,
) -> list[Result]:
    """Return ``[run(spec, report) for spec in specs]``, computed in ``workers`` processes.

    ``progress`` (if given) is called in this process with the total events done so far,
    about five times a second and once at the end.
    """
    # spawn, not fork: the caller may have threads (an event loop, a progress bar).
    ctx = multiprocessing.get_context("spawn")
    reports: multiprocessing.queues.Queue[int] = ctx.Queue()
    done = 0

    def drain(timeout: float) -> None:
        nonlocal done
        try:
            events = reports.get(timeout=timeout)
            while True:
                done += events
                events = reports.get_nowait()
        except queue.Empty:
            pass
        if progress is not None:
            progress(done)

    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(reports,)
    ) as pool:
        futures: list[Future[Result]] = [pool.submit(_run_in_worker, run, spec) for spec in specs]
        pending = set(futures)
        while pending:
            drain(0.2)
            _, pending = wait(pending, timeout=0, return_when=FIRST_COMPLETED)
        drain(0.0)
        return [f.result() for f in futures]


def run_blocks_in_threads(
    run: BlockRunner[Spec, Result],
    specs: Sequence[Spec],
    workers: int,
    progress: Callable[[int], None] | None,
) -> list[Result]:
    """Return ``[run(spec, report) for spec in specs]``, computed in ``workers`` threads of
    this process: for a compiled kernel, which releases the GIL. ``progress`` (if given) gets
    the total events done so far, about five times a second, in the calling thread."""
    reports: queue.SimpleQueue[int] = queue.SimpleQueue()
    done = 0

    def drain() -> None:
        nonlocal done
        while True:
            try:
                done += reports.get_nowait()
            except queue.Empty:
                break
        if progress is not None:
            progress(done)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gossip-sim") as pool:
        futures = [pool.submit(run, spec, reports.put) for spec in specs]
        pending: set[Future[Result]] = set(futures)
        while pending:
            _, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            drain()
        return [f.result() for f in futures]
