"""The coordinator of the churn tests (test_churn_live, test_churn_secure): line:8 at 60/s,
one-hot values to 1e-8, short timings; each test overrides what it needs.

The coordinator keeps running until the test has made its last membership change and the
members of the last view have reached eps (:func:`stop_once_reached`): a loaded machine can
take seconds to start a ``gossip node --leave`` process, and a run that reached eps before the
change would stop before it (a change is refused once the run is stopping).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

from continuized.coordinator.figures.records import RunSummary
from continuized.coordinator.local.broker import RunningBroker
from continuized.coordinator.machine.ports import free_port
from continuized.coordinator.run.service import Coordinator, CoordinatorConfig


def churn_config(broker: RunningBroker, tmp_path: Path, **over: object) -> CoordinatorConfig:
    """A coordinator's config on ``broker``, with files under ``tmp_path``; ``over`` wins."""
    base: dict[str, object] = {
        "graph": "line:8",
        "broker": broker.url,
        "bind": f"tcp://127.0.0.1:{free_port()}",
        "rate": 60.0,
        "values": "onehot",
        "until": 1e-8,
        "cluster": f"t{free_port()}",
        "metrics_file": tmp_path / "run.jsonl",
        "json_path": tmp_path / "run.json",
        "metrics_period": 0.05,
        "start_delay": 0.5,
        "register_timeout": 90.0,
        "stop_timeout": 15.0,
        "keep_running": True,
    }
    base.update(over)
    return CoordinatorConfig(**base)  # type: ignore[arg-type]


async def stop_once_reached(
    coord: Coordinator, run: asyncio.Task[RunSummary | None], within: float = 120.0
) -> RunSummary | None:
    """After the test's last change: wait until the current view reaches eps, then stop."""
    await until(lambda: coord.state.reached, within)
    coord.request_stop("reached")
    return await run


async def until(predicate: Callable[[], object], within: float) -> None:
    """Wait for ``predicate()`` to hold (a count or an event, never a fixed time)."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 -- the coordinator's state: no event to await
            await asyncio.sleep(0.05)


async def exit_codes(
    procs: Sequence[asyncio.subprocess.Process], within: float = 90.0
) -> list[int]:
    """Wait for every node process to exit (they stop once the run is over): their codes."""
    async with asyncio.timeout(within):
        return [await p.wait() for p in procs]


def kill_left(procs: Sequence[asyncio.subprocess.Process]) -> None:
    """Kill the node processes still running (a failed test leaves none behind)."""
    for p in procs:
        if p.returncode is None:
            p.kill()
