"""Deployment commands fail fast and point the right way (real commands, real sockets).

* ``gossip coordinator`` with its broker down: one ``error:`` line naming the broker and the
  fix, long before the registration timeout;
* a bad ``--bind`` (malformed, not an address of this machine, a port in use): exit 2 before
  anything starts, for ``gossip coordinator`` and ``gossip node``;
* ``gossip submit``: a bad value is refused here (exit 2, no broker asked), and a broker without
  a standing coordinator is said within ``--standing-wait``, naming it and what to start.
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

from continuized.coordinator.local.broker import RunningBroker

GOSSIP = [sys.executable, "-m", "continuized.cli.app"]
NOT_HERE = "192.0.2.1"  # TEST-NET-1 (RFC 5737): the address of no machine


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port some other program listens on for the whole test."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def _run(args: list[str], tmp_path: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    env.update(TMPDIR=str(tmp), COLUMNS="300")
    return subprocess.run(
        [*GOSSIP, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )


def _one_error_line(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The one ``error:`` line of a refused command (no traceback, nothing else failed)."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def _nothing_started(tmp_path: Path) -> None:
    assert list((tmp_path / "tmp").iterdir()) == []
    for proc in psutil.process_iter(["cmdline"]):
        assert str(tmp_path) not in " ".join(proc.info["cmdline"] or ())


@pytest.mark.cluster
def test_coordinator_with_its_broker_down_names_it_long_before_registration_times_out(
    tmp_path: Path,
) -> None:
    url = f"mqtt://127.0.0.1:{_closed_port()}"
    # A registration timeout of an hour: only the broker check can end this within the
    # subprocess timeout.
    result = _run(
        [
            *("coordinator", "--graph", "line:4", "--broker", url),
            *("--bind", "tcp://127.0.0.1:0", "--register-timeout", "3600", "--broker-wait", "3"),
        ],
        tmp_path,
        timeout=120,
    )
    line = _one_error_line(result)
    assert f"cannot reach the MQTT broker {url}" in line
    assert "mosquitto" in line
    assert "--broker" in line
    assert "registered" not in result.stderr


def test_coordinator_tells_the_nodes_a_connect_address_not_the_wildcard(tmp_path: Path) -> None:
    # No broker: the start line, then the registration timeout's message, both with the
    # address the nodes should connect to.
    port = _closed_port()
    result = _run(
        [
            *("coordinator", "--graph", "line:4", "--bind", f"tcp://0.0.0.0:{port}"),
            *("--register-timeout", "0.5"),
        ],
        tmp_path,
    )
    line = _one_error_line(result)
    assert "only 0 of 4 nodes registered" in line
    assert "gossip node --coordinator tcp://" in line
    assert f"--coordinator tcp://0.0.0.0:{port}" not in result.stderr
    assert f":{port}`" in line


@pytest.mark.parametrize(
    ("bind", "said"),
    [
        ("tcp://127.0.0.1", "has no host or no port"),
        ("127.0.0.1:5555", "is not a ZeroMQ address"),
        ("tcp://127.0.0.1:70000", "the port must be 0..65535"),
        (f"tcp://{NOT_HERE}:5555", f"{NOT_HERE} is not an address of this machine"),
    ],
    ids=["no-port", "no-scheme", "bad-port", "not-here"],
)
@pytest.mark.parametrize("command", ["coordinator", "node"])
def test_a_bad_bind_exits_2_before_anything_starts(
    command: str, bind: str, said: str, tmp_path: Path
) -> None:
    args = (
        ["coordinator", "--graph", "line:4", "--broker", f"mqtt://127.0.0.1:{_closed_port()}"]
        if command == "coordinator"
        else ["node", "--coordinator", f"tcp://127.0.0.1:{_closed_port()}"]
    )
    line = _one_error_line(_run([*args, "--bind", bind], tmp_path))
    assert f"--bind {bind}" in line or f"--bind {bind!r}" in line
    assert said in line
    assert "broker" not in line  # refused before the broker was tried
    _nothing_started(tmp_path)


def test_a_node_refuses_a_bind_port_in_use(busy_port: int, tmp_path: Path) -> None:
    bind = f"tcp://127.0.0.1:{busy_port}"
    result = _run(["node", "--coordinator", "tcp://127.0.0.1:1", "--bind", bind], tmp_path)
    line = _one_error_line(result)
    assert f"--bind {bind}" in line
    assert "in use" in line


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--rate", "-1"], "--rate must be a finite number > 0, got -1.0"),
        (["--until", "0"], "--until must be a finite number > 0, got 0.0"),
        (["--graph", "grid:0x3"], "grid"),
        (["--algorithm", "fast"], "fast"),
        (["--wait", "-5"], "--wait must be"),
    ],
    ids=["rate", "until", "graph", "algorithm", "wait"],
)
def test_submit_checks_its_values_here_before_asking_the_broker(
    args: list[str], said: str, tmp_path: Path
) -> None:
    url = f"mqtt://127.0.0.1:{_closed_port()}"  # nothing listens: asked, it would say so
    line = _one_error_line(_run(["submit", "--broker", url, *args], tmp_path))
    assert said in line
    assert "broker" not in line


def test_submit_names_a_broker_that_is_not_there(tmp_path: Path) -> None:
    url = f"mqtt://127.0.0.1:{_closed_port()}"
    line = _one_error_line(_run(["submit", "--broker", url], tmp_path))
    assert f"cannot reach the MQTT broker {url}" in line


@pytest.mark.broker
async def test_submit_without_a_standing_coordinator_says_so_naming_it(
    mosquitto: RunningBroker, tmp_path: Path
) -> None:
    import asyncio

    result = await asyncio.to_thread(
        _run,
        ["submit", "--broker", mosquitto.url, "--cluster", "lonely", "--standing-wait", "1"],
        tmp_path,
    )
    line = _one_error_line(result)
    assert "no standing coordinator of cluster 'lonely'" in line
    assert mosquitto.url in line
    assert "gossip coordinator --standing" in line
    assert "not submitted" in line
