"""A fork server for node processes: import once, then fork one process per host of nodes.

Starting a node process costs about 0.7 s of CPU before it does anything (the interpreter,
numpy, pyzmq, aiomqtt, typer): 100 of them on two cores kept ``gossip up`` busy for tens of
seconds before t = 0. This server pays the imports once; each node process is then an
``os.fork()`` of it, running the ordinary ``gossip node`` command line, in a few milliseconds.
The children are real, independent processes (their own pid, session, sockets and event
loop); they share only the server's memory pages until they write to them.

Run as ``python -m continuized.cli.forkserver``; it speaks JSON lines (the launcher in
:mod:`coordinator.local.launcher` is the client):

``python -m continuized.cli.forkserver --optimization`` also imports what an optimization run's
nodes load (the data readers, scikit-learn's bundled sets, the problems) and the compiled solver
(:func:`gossip.problems.compiled_newton.compiled_solver`): about a second of CPU that each of
30 children paid again, and numba's compilation, which 30 children would do at once on a
machine where its cache is still empty.

* stdin, one request a line: ``{"argv": ["node", "--coordinator", ...], "log": PATH}``;
* stdout, ``{"pid": PID}`` for each request (in order), and ``{"exit": PID, "code": CODE}``
  when a child ends (``CODE`` negative: killed by that signal).

Every child leads its own session and gets SIGTERM if the server dies
(``PR_SET_PDEATHSIG``); the server dies with its parent the same way. When stdin closes the
server sends SIGTERM to the children still running, reaps them and exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import random
import select
import signal
import sys
import traceback
from typing import TYPE_CHECKING, Any

from continuized.coordinator.machine.children import lower_priority

if TYPE_CHECKING:
    from typer._click.core import Command

__all__ = ["main"]

_PR_SET_PDEATHSIG = 1


def _preload_optimization() -> None:
    """Import what an optimization run's node loads, and compile (or load) its solver."""
    import sklearn.datasets  # noqa: F401  # the bundled sets' reader: most of a second

    import continuized.gossip.datasets
    import continuized.gossip.problems  # noqa: F401
    from continuized.gossip.problems.compiled_newton import compiled_solver

    compiled_solver()


def _preload_training() -> None:
    """Import what a training run's node loads: the trainer and the data readers.

    Not scikit-learn: the bundled classification sets (``digits``, ``wine``, ``iris``) are
    read from their files without it (:mod:`gossip.datasets.sources`), and its import would
    be in every node's memory (about 70 MB of RSS per node for the MLP on digits). A node
    whose data needs it (``svmlight:``, ``breast-cancer``) imports it itself.
    """
    import continuized.gossip.datasets
    import continuized.gossip.train  # noqa: F401


def _preload() -> Command:
    """Import everything a node process needs, so that forked children import nothing.

    Returns the command line, built (typer builds it from the annotations, ~25 ms).
    """
    import concurrent.futures.thread  # noqa: F401  # the event loop's default executor

    import aiomqtt  # noqa: F401
    import numpy  # noqa: F401
    import rich._emoji_codes  # noqa: F401  # used by error messages
    import typer._click.decorators
    import typer.main
    import zmq  # noqa: F401

    import continuized.node.host  # noqa: F401
    from continuized.cli import app  # the command line the children run

    with contextlib.suppress(ImportError):
        import uvloop  # noqa: F401  # type: ignore[import-not-found,unused-ignore]
    return typer.main.get_command(app.app)


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _child(command: Command, argv: list[str], log: str, parent: int) -> int:
    """In the forked child: detach, point stdio at ``log``, run ``gossip ARGV``; exit code."""
    os.setsid()
    lower_priority(0)  # the server's niceness, which we inherit, for our new session too
    _die_with_parent()
    if os.getppid() != parent:  # the server died between the fork and the prctl
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)
    # The server's random state was copied: without a reseed every child would draw the same
    # MQTT client identifiers (and the broker would drop all but one of them).
    random.seed()
    try:
        command.main(args=argv, prog_name="gossip")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException:  # report anything, then exit like a crashed process
        traceback.print_exc()
        return 1
    return 0


def _emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _reap(children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _emit({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _fork(command: Command, request: dict[str, Any], children: set[int]) -> None:
    argv, log = request["argv"], request["log"]
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        raise ValueError(f"argv must be a list of strings, got {argv!r}")
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; coverage does not follow forks
        code = 1
        try:
            code = _child(command, argv, str(log), parent)
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    children.add(pid)
    _emit({"pid": pid})


def main() -> None:
    """Serve fork requests on stdin until it closes (see the module header)."""
    _die_with_parent()
    command = _preload()
    if "--optimization" in sys.argv[1:]:
        _preload_optimization()
    if "--training" in sys.argv[1:]:
        _preload_training()
    # Move what the imports built out of the collector's sight: children then never write to
    # those pages to collect them, so the pages stay shared.
    gc.collect()
    gc.freeze()
    children: set[int] = set()
    stdin = sys.stdin.buffer
    buffered = b""
    try:
        while True:
            ready, _, _ = select.select([stdin], [], [], 0.2)
            _reap(children)
            if not ready:
                continue
            chunk = os.read(stdin.fileno(), 65536)
            if not chunk:
                break
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                if line.strip():
                    _fork(command, json.loads(line), children)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        while children:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            children.discard(pid)
            _emit({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    main()
