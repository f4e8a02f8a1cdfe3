"""Fixtures of the dashboard tests: a synthetic cluster's state and a dashboard serving it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from continuized.coordinator.dashboard import serve
from continuized.coordinator.dashboard.synthetic import SyntheticCluster
from continuized.coordinator.figures.state import ClusterState


class Served:
    """A dashboard running in the test's event loop."""

    def __init__(self, url: str, state: ClusterState, task: asyncio.Task[None]) -> None:
        self.url = url
        self.state = state
        self.task = task


@pytest.fixture
async def start_dashboard() -> AsyncIterator[Callable[..., Any]]:
    """Start ``serve(state, "127.0.0.1", 0, ...)``; every started dashboard stops at teardown."""
    tasks: list[asyncio.Task[None]] = []

    async def start(state: ClusterState, **kwargs: Any) -> Served:
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        kwargs.setdefault("band_runs", 0)
        task = asyncio.create_task(
            serve(state, "127.0.0.1", 0, on_ready=ready.set_result, **kwargs), name="dashboard"
        )
        tasks.append(task)
        async with asyncio.timeout(10):
            done, _ = await asyncio.wait({ready, task}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # raises the start-up error
        return Served(ready.result(), state, task)

    yield start
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
def cluster() -> SyntheticCluster:
    """A 5x5 grid running ARG at 400 activations per second, not started."""
    return SyntheticCluster("grid:5x5", "arg", rate=400.0, seed=1, run_id="run-a")
