"""Child processes that never outlive their parent: spawn, watch, and stop them for sure.

Every child is started in its own session (so its own process group): a Ctrl-C typed at the
terminal reaches only the parent, which then stops the children in order, rather than every
process at once. On Linux each child also asks the kernel to send it SIGTERM when its parent
dies (``PR_SET_PDEATHSIG``), so even a parent killed with SIGKILL leaves no orphans behind.

Stopping is "terminate, then kill": SIGTERM to the child's process group, a grace period, then
SIGKILL to the group, then a wait that reaps the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Protocol

__all__ = [
    "NODE_NICENESS",
    "Child",
    "lower_priority",
    "node_niceness",
    "python_module",
    "spawn",
    "stop_all",
    "stop_process",
]

NODE_NICENESS = 10
"""The niceness of the node processes ``gossip up`` starts on its own machine. The coordinator
and the broker measure the run, and on a machine the nodes fill they must still be served:
4,096 nodes in 32 processes on 2 cores, all at the same priority, left the coordinator 30 of
the 500 reports a second it was sent, 20 s behind at the stop, and every exact point of the
run was lost. The nodes still have all the CPU the coordinator and the broker leave.

Each node process leads a session of its own, and Linux (``sched_autogroup``, on by default on
desktops and many servers) weighs the sessions against each other, whatever their processes'
niceness: the node processes also lower their session's (:func:`lower_priority`). With the
processes' niceness alone, the coordinator still had 6% of the machine.

Host mode only (:func:`node_niceness`): with one process per node, the coordinator and the
broker, waking for every report, preempted the nodes in the middle of their exchanges.
Measured on line:30 at 600/s, alternated on one machine: the round trip's p99 was 11-14 ms at
niceness 10 and 6-10 ms at 0, for the same CPU."""


def python_module(module: str, *args: str) -> list[str]:
    """The command line of ``python -m module args`` with this interpreter, the folder it runs
    in left off the import path (``-P``): a user's own ``cli/`` package or ``node.py`` where
    ``gossip up`` runs must not stand in for this package's modules.

    Examples
    --------
    >>> python_module("continuized.coordinator.machine.offload", "-v")[1:]
    ['-P', '-m', 'continuized.coordinator.machine.offload', '-v']
    """
    return [sys.executable, "-P", "-m", module, *args]


def node_niceness(nodes_per_process: int) -> int:
    """The niceness of ``gossip up``'s node processes: :data:`NODE_NICENESS` in host mode
    (``nodes_per_process`` > 1, where thousands of nodes could starve the coordinator), 0
    with one process per node.

    Examples
    --------
    >>> node_niceness(1), node_niceness(128)
    (0, 10)
    """
    return NODE_NICENESS if nodes_per_process > 1 else 0


class Child(Protocol):
    """What stopping needs of a child process: an ``asyncio.subprocess.Process``, or a node
    process forked by the fork server (:class:`coordinator.local.forking.ForkedProcess`)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def lower_priority(nice: int) -> None:
    """Add ``nice`` to this process's niceness, and give its session's autogroup the niceness
    the process then has (call it after ``setsid``: see :data:`NODE_NICENESS`)."""
    with contextlib.suppress(OSError):
        level = os.nice(nice)
        # Linux only, and only while sched_autogroup is on; a new session's group starts at 0.
        with open("/proc/self/autogroup", "w") as group:
            group.write(f"{level}\n")


def _lowered(nice: int) -> None:  # pragma: no cover - runs in the child between fork and exec
    _die_with_parent()
    lower_priority(nice)


async def spawn(
    argv: Sequence[str],
    *,
    log: Path | IO[bytes] | None = None,
    env: dict[str, str] | None = None,
    stdout_pipe: bool = False,
    stdin_pipe: bool = False,
    nice: int = 0,
) -> asyncio.subprocess.Process:
    """Start ``argv`` as a child in its own session that dies with this process.

    Parameters
    ----------
    argv : sequence of str
        Program and arguments.
    log : path or binary file, optional
        Where the child's stderr (and stdout, unless ``stdout_pipe``) go; default: discarded.
    env : dict, optional
        Environment of the child (default: inherited).
    stdout_pipe : bool
        Give the child's stdout to the caller as ``process.stdout``.
    stdin_pipe : bool
        Give the child's stdin to the caller as ``process.stdin`` (default: /dev/null).
    nice : int
        Added to the child's niceness (its priority lowered by that much; 0: as ours).
    """
    opened: IO[bytes] | None = None
    if isinstance(log, Path):
        opened = log.open("ab")
        sink: IO[bytes] | int = opened
    elif log is None:
        sink = asyncio.subprocess.DEVNULL
    else:
        sink = log
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin_pipe else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE if stdout_pipe else sink,
            stderr=sink,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent if not nice else functools.partial(_lowered, nice),
        )
    finally:
        if opened is not None:
            opened.close()  # the child holds its own copy of the descriptor


def _signal_group(proc: Child, sig: signal.Signals) -> None:
    # The child leads its own process group (start_new_session), so its pid is the group id;
    # signalling the group also reaches anything the child started.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


async def stop_process(proc: Child, grace: float = 5.0) -> int | None:
    """Stop ``proc``: SIGTERM to its group, wait up to ``grace`` seconds, then SIGKILL.

    Returns the exit code (negative for a signal), or ``None`` if it could not be reaped.
    """
    if proc.returncode is None:
        _signal_group(proc, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), timeout=grace)
    # Kill whatever is left of the group even if the leader is gone: grandchildren may remain.
    _signal_group(proc, signal.SIGKILL)
    if proc.returncode is None:
        try:
            await asyncio.wait_for(proc.wait(), timeout=grace)
        except TimeoutError:
            return None
    return proc.returncode


async def stop_all(procs: Sequence[Child], grace: float = 5.0) -> None:
    """Stop every process in ``procs`` at once (SIGTERM all, then SIGKILL the stragglers).

    Shielded from cancellation so that a Ctrl-C arriving during shutdown cannot leave children
    behind.
    """
    if not procs:
        return
    stopping = asyncio.gather(*(stop_process(p, grace) for p in procs), return_exceptions=True)
    try:
        await asyncio.shield(stopping)
    except asyncio.CancelledError:
        await stopping  # finish the job, then let the cancellation through
        raise
