"""What else the machine is doing: the CPU that other jobs take from a benchmark.

Benchmarks here run on shared two-core machines, where another job's load can halve a figure
from one run to the next. They print how busy the machine was, so that a reader can tell a
slower run from a busier machine.
"""

from __future__ import annotations

import asyncio

import psutil


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy (every core, every process) so far."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


async def background_cores(seconds: float = 1.0) -> float:
    """Cores kept busy by the machine over the next ``seconds``, while the caller idles: the
    load of other jobs (and of what the caller left running)."""
    before = busy_cpu_seconds()
    await asyncio.sleep(seconds)
    return (busy_cpu_seconds() - before) / seconds
