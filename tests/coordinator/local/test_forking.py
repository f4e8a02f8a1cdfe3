"""The node fork server: forked ``gossip node`` processes, their exit codes, and clean-up."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from continuized.cli.entries import NODE_ENTRIES
from continuized.coordinator.local.forking import ForkServer
from continuized.coordinator.machine.children import stop_process

pytestmark = [pytest.mark.timeout(60)]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def until(condition: Callable[[], bool], within: float = 20.0) -> None:
    """Wait until ``condition()`` holds (checked every 20 ms), or fail after ``within`` s."""
    for _ in range(int(within / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


async def test_forked_nodes_report_exit_codes_and_die_with_the_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    server = await ForkServer.start(NODE_ENTRIES.fork_server, env, log=tmp_path / "server.log")
    try:
        # A bad option: the forked command line reports it and exits 2, like `gossip node`.
        bad = await server.fork(
            ["node", "--coordinator", "tcp://127.0.0.1:9", "--nodes-per-process", "0"],
            tmp_path / "bad.log",
        )
        assert await asyncio.wait_for(bad.wait(), 30) == 2
        assert "--nodes-per-process must be >= 1" in (tmp_path / "bad.log").read_text()
        # Two nodes waiting for a coordinator that never answers: real, separate processes,
        # each in its own session (so its own process group).
        waiting = [
            await server.fork(
                ["node", "--coordinator", "tcp://127.0.0.1:9", "--name", f"w{k}"],
                tmp_path / f"w{k}.log",
            )
            for k in range(2)
        ]
        for k, child in enumerate(waiting):
            assert psutil.Process(child.pid).ppid() == server.pid
            log = tmp_path / f"w{k}.log"
            await until(lambda log=log: log.exists() and "registering" in log.read_text())
            assert os.getpgid(child.pid) == child.pid
        # Stopped like any node: SIGTERM to its group; it exits 0 (stopped before bootstrap).
        assert await stop_process(waiting[0]) == 0
        assert waiting[1].returncode is None
    finally:
        await server.aclose()
    # Closing the server stops the children it still had.
    assert waiting[1].returncode in (0, -signal.SIGTERM, -signal.SIGKILL)
    assert _gone(waiting[1].pid)
    assert _gone(server.pid)


def test_the_nodes_get_no_gossip_variable_but_the_shared_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from continuized.coordinator.local.forking import node_environment

    monkeypatch.setenv("GOSSIP_TIMEOUT", "5")
    monkeypatch.setenv("GOSSIP_SOLVER", "numpy")
    monkeypatch.setenv("UNRELATED", "kept")
    env = node_environment()
    assert "GOSSIP_TIMEOUT" not in env
    assert env["GOSSIP_SOLVER"] == "numpy"
    assert env["UNRELATED"] == "kept"


async def test_an_optimization_server_has_the_solver_loaded_before_it_forks(
    tmp_path: Path,
) -> None:
    # --optimization: the server imports the data readers and loads the compiled solver once
    # (its children then find them in memory), and still forks nodes.
    import importlib.util

    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    server = await ForkServer.start(
        NODE_ENTRIES.fork_server, env, log=tmp_path / "server.log", optimization=True
    )
    try:
        child = await server.fork(
            ["node", "--coordinator", "tcp://127.0.0.1:9", "--nodes-per-process", "0"],
            tmp_path / "child.log",
        )
        assert await asyncio.wait_for(child.wait(), 30) == 2
        maps = " ".join(m.path for m in psutil.Process(server.pid).memory_maps())
        assert "sklearn" in maps  # scikit-learn's compiled modules are mapped in the server
        if importlib.util.find_spec("numba") is not None:
            assert "numba" in maps  # and numba's, with the solver compiled or loaded
    finally:
        await server.aclose()


async def test_a_fork_cancelled_while_waiting_leaves_the_server_closable(tmp_path: Path) -> None:
    # A run that fails while a node is being forked (a busy dashboard port, say) cancels the
    # fork; the server's answer then finds no one waiting, and closing must still work, so the
    # run's own error is the one reported.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    server = await ForkServer.start(NODE_ENTRIES.fork_server, env, log=tmp_path / "server.log")
    fork = asyncio.create_task(
        server.fork(["node", "--coordinator", "tcp://127.0.0.1:9"], tmp_path / "n.log")
    )
    await until(lambda: bool(server._answers))  # the request is out, its answer awaited
    fork.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fork
    await server.aclose()  # InvalidStateError here before
    assert server._reader.done()
    assert server._reader.exception() is None
