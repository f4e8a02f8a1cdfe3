"""Run a blocking, CPU-bound function in a child process at the lowest priority.

The simulator is Python and numpy: run in a thread it would hold the GIL and stall the
coordinator's event loop (registration, the MQTT link, the dashboard). :func:`offload` runs
it in a plain subprocess (``python -m continuized.coordinator.machine.offload``) instead: the
function is named by its module and name, its arguments and result travel pickled over the
child's pipes, the child runs at a lower priority so that on a small machine it takes little
time from the nodes, and cancelling the call kills it, so the coordinator never leaves one behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import pickle
import sys
from collections.abc import Callable
from typing import Any

from continuized.coordinator.machine.children import python_module
from continuized.gossip.errors import ConfigError

__all__ = ["offload"]


async def offload(nice: int, func: Callable[..., Any], *args: Any) -> Any:
    """Return ``func(*args)``, computed in a child process, without blocking the event loop.

    ``nice`` is the child's niceness (19: the lowest priority; what a result waited for
    should not have, on a busy machine, where every other job would come first).

    ``func`` must be a module-level function (the child imports it by name) and ``args`` and
    the result picklable. Cancelling the call (for example under ``asyncio.timeout``) kills
    the child.

    Raises
    ------
    ConfigError
        If the call failed in the child (the message carries the child's last error line).
    """
    payload = pickle.dumps((nice, func.__module__, func.__qualname__, args))
    proc = await asyncio.create_subprocess_exec(
        *python_module("continuized.coordinator.machine.offload"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await proc.communicate(payload)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines()
        raise ConfigError(
            f"{func.__qualname__} failed in its child process (exit code {proc.returncode}): "
            f"{lines[-1] if lines else 'no error output'}"
        )
    return pickle.loads(out)


def _main() -> None:
    nice, module, name, args = pickle.loads(sys.stdin.buffer.read())
    with contextlib.suppress(OSError):
        os.nice(nice)
    func = getattr(importlib.import_module(module), name)
    sys.stdout.buffer.write(pickle.dumps(func(*args)))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    _main()
