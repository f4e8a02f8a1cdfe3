"""The launcher's side of the node fork server (``NodeEntries.fork_server``).

:class:`ForkServer` starts the server as a child of this process, asks it for node processes
and follows their exits. Each :class:`ForkedProcess` looks like an
``asyncio.subprocess.Process`` to :mod:`coordinator.machine.children` (``pid``, ``returncode``,
``wait()``): the children lead their own sessions, so stopping one is the same
"SIGTERM to its group, then SIGKILL".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from continuized.coordinator.machine.children import python_module, spawn, stop_process
from continuized.gossip.errors import LocalError

__all__ = ["ForkServer", "ForkedProcess", "node_environment"]

SHARED_VARIABLES = frozenset({"GOSSIP_SOLVER"})
"""GOSSIP_* variables that mean the same to every process (:mod:`gossip.problems.compiled_newton`),
so the node processes get them."""


def node_environment() -> dict[str, str]:
    """This process's environment for node processes: without its GOSSIP_* variables.

    The nodes get their settings from their arguments only: a GOSSIP_* variable meant for
    `gossip up` (GOSSIP_TIMEOUT, GOSSIP_BIND, ...) means something else to `gossip node`.
    :data:`SHARED_VARIABLES` are the exceptions.
    """
    return {
        k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_") or k in SHARED_VARIABLES
    }


log = logging.getLogger(__name__)


class ForkedProcess:
    """A node process forked by the server: its pid, and its exit code once it has ended."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self._exited = asyncio.Event()

    def _exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()

    async def wait(self) -> int:
        """Wait until the process has ended; return its exit code (negative: a signal)."""
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode


class ForkServer:
    """A running fork server. Use :meth:`start`, then :meth:`fork`, then :meth:`aclose`."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self._proc = proc
        self._children: dict[int, ForkedProcess] = {}
        self._early: dict[int, int] = {}  # exits read before their pid's answer was handled
        self._answers: deque[asyncio.Future[int]] = deque()
        self._lock = asyncio.Lock()
        self._reader = asyncio.create_task(self._read(), name="forkserver-reader")

    @classmethod
    async def start(
        cls,
        module: str,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        optimization: bool = False,
        training: bool = False,
        nice: int = 0,
    ) -> ForkServer:
        """Start the fork server, ``python -P -m MODULE`` (it imports the node code once, ~1 s).

        ``optimization``: also import what an optimization run's nodes load, and compile
        their solver, once for every child. ``training``: also import the trainer and the
        data readers (seconds on a small machine, which would start the clocks late).
        ``nice``: the server's niceness, above ours, which its children inherit.
        """
        flags = (["--optimization"] if optimization else []) + (["--training"] if training else [])
        # Started in our working directory, as its children are (none changes it): there they
        # find a user's --problem/--model module, as gossip up did (gossip.datasets.user_code).
        proc = await spawn(
            python_module(module, *flags),
            log=log,
            env=env,
            stdout_pipe=True,
            stdin_pipe=True,
            nice=nice,
        )
        return cls(proc)

    @property
    def pid(self) -> int:
        """The server's own pid."""
        return self._proc.pid

    async def fork(self, argv: Sequence[str], log: Path) -> ForkedProcess:
        """Start ``gossip ARGV`` as a forked process writing to ``log``; return it.

        Raises
        ------
        LocalError
            The server has exited (its log says why).
        """
        stdin = self._proc.stdin
        assert stdin is not None
        async with self._lock:  # answers come in request order
            answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            self._answers.append(answer)
            try:
                stdin.write((json.dumps({"argv": list(argv), "log": str(log)}) + "\n").encode())
                await stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                self._answers.remove(answer)
                raise LocalError("the node fork server has exited; see its log") from None
            pid = await answer
        child = ForkedProcess(pid)
        self._children[pid] = child
        code = self._early.pop(pid, None)
        if code is not None:
            child._exit(code)
        return child

    async def _read(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        try:
            while line := await stdout.readline():
                try:
                    message = json.loads(line)
                except ValueError:
                    log.warning("fork server: not JSON: %r", line[:200])
                    continue
                if "pid" in message and self._answers:
                    answer = self._answers.popleft()
                    # A fork cancelled while waiting (the run failed meanwhile) has no one to
                    # answer; the server stops that child when its stdin closes.
                    if not answer.done():
                        answer.set_result(int(message["pid"]))
                elif "exit" in message:
                    pid, code = int(message["exit"]), int(message["code"])
                    child = self._children.get(pid)
                    if child is None:
                        self._early[pid] = code
                    else:
                        child._exit(code)
        finally:
            # The server is gone: its children died with it (PR_SET_PDEATHSIG), and nobody
            # will report them any more.
            for child in self._children.values():
                if child.returncode is None:
                    child._exit(-9)
            while self._answers:
                answer = self._answers.popleft()
                if not answer.done():
                    answer.set_exception(LocalError("the node fork server has exited; see its log"))

    async def aclose(self, grace: float = 5.0) -> None:
        """Close the server's stdin (it stops its remaining children), then stop it."""
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._proc.wait()), grace)
        await stop_process(self._proc, grace)
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
