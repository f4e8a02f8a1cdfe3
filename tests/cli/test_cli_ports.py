"""Busy ports and a dashboard-less ``--hold`` are refused before anything starts.

Each test holds a real listening socket on loopback and runs the real command against it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

GOSSIP = [sys.executable, "-m", "continuized.cli.app"]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port some other program listens on for the whole test."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    env.update(TMPDIR=str(tmp), COLUMNS="200")
    return subprocess.run(
        [*GOSSIP, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one ``error:`` line of a refused command (no traceback, nothing else failed)."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def _nothing_started(tmp_path: Path) -> None:
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]
    assert list((tmp_path / "tmp").iterdir()) == []
    for proc in psutil.process_iter(["cmdline"]):
        assert str(tmp_path) not in " ".join(proc.info["cmdline"] or ())


def test_up_refuses_a_busy_dashboard_port_before_the_broker_starts(
    busy_port: int, tmp_path: Path
) -> None:
    result = _run(
        ["up", "--graph", "line:4", "--quiet", "--dashboard-port", str(busy_port)], tmp_path
    )
    line = _one_error_line(result)
    assert f"--dashboard-port {busy_port}" in line
    assert "in use" in line
    assert "choose another --dashboard-port" in line
    assert "starting" not in result.stderr  # printed once the broker is up
    _nothing_started(tmp_path)


def test_up_refuses_hold_without_a_dashboard(tmp_path: Path) -> None:
    line = _one_error_line(_run(["up", "--graph", "line:4", "--quiet", "--hold", "40"], tmp_path))
    assert "--hold 40" in line
    assert "--dashboard-port" in line
    _nothing_started(tmp_path)


def test_up_accepts_hold_zero_without_a_dashboard() -> None:
    from continuized.cli.options.cluster import check_hold

    check_hold("0", 0.0, None)  # the default: nothing to hold, nothing to refuse
    check_hold("40", 40.0, 8080)


def test_coordinator_refuses_a_busy_dashboard_port_and_a_busy_bind(
    busy_port: int, tmp_path: Path
) -> None:
    base = ["coordinator", "--graph", "line:4", "--bind", "tcp://127.0.0.1:0"]
    line = _one_error_line(_run([*base, "--dashboard-port", str(busy_port)], tmp_path))
    assert f"--dashboard-port {busy_port}" in line
    assert "in use" in line
    bind = f"tcp://127.0.0.1:{busy_port}"
    line = _one_error_line(_run([*base[:-2], "--bind", bind], tmp_path))
    assert f"--bind {bind}" in line
    assert "in use" in line


def test_coordinator_refuses_hold_without_a_dashboard(tmp_path: Path) -> None:
    line = _one_error_line(_run(["coordinator", "--graph", "line:4", "--hold", "5"], tmp_path))
    assert "--hold 5" in line
    assert "--dashboard-port" in line


def test_node_refuses_a_busy_port_of_its_host_mode_range(busy_port: int, tmp_path: Path) -> None:
    # Host mode binds PORT and PORT+1: the busy one is the second.
    bind = f"tcp://127.0.0.1:{busy_port - 1}"
    args = ["node", "--coordinator", "tcp://127.0.0.1:1", "--bind", bind]
    line = _one_error_line(_run([*args, "--nodes-per-process", "2"], tmp_path))
    assert f"--bind {bind}" in line
    assert f"127.0.0.1:{busy_port} is already in use" in line


def test_a_free_port_and_port_zero_pass() -> None:
    from continuized.coordinator.machine.interfaces import check_zmq_bind
    from continuized.coordinator.machine.ports import check_port_free

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = int(sock.getsockname()[1])
    check_port_free("--dashboard-port", "127.0.0.1", free)
    check_port_free("--dashboard-port", "127.0.0.1", 0)
    check_port_free("--dashboard-port", "127.0.0.1", None)
    check_zmq_bind("--bind", "tcp://0.0.0.0:0")
    check_zmq_bind("--bind", "ipc:///tmp/x")
