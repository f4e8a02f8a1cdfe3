"""``gossip up`` as a restart policy: a node process killed with SIGKILL mid-run comes back on
its address under its name, and the run goes on to eps with the exact mass; a run that fails
still writes its ``--json``.

Every process is real (``gossip up`` as a subprocess, its fork server, its node processes and
mosquitto); the test waits for events in the run's metrics file and logs, not for seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]

GOSSIP = [sys.executable, "-m", "continuized.cli.app"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    env["COLUMNS"] = "120"
    return env


def _kinds(metrics: Path) -> list[str]:
    if not metrics.exists():
        return []
    kinds = []
    for line in metrics.read_text().splitlines():
        try:
            kinds.append(json.loads(line)["kind"])
        except (ValueError, KeyError):
            continue  # a line being written
    return kinds


async def _wait_mid_run(metrics: Path, points: int, proc: asyncio.subprocess.Process) -> None:
    """Wait until the run has started and the coordinator measured ``points`` errors."""
    async with asyncio.timeout(120):
        while True:
            kinds = _kinds(metrics)
            if "start" in kinds and kinds.count("point") >= points:
                break
            assert proc.returncode is None, "gossip up ended before the run started"
            await asyncio.sleep(0.05)
    assert "reached" not in kinds, "the run reached eps before the kill: make it longer"


def _process_logging_to(root: int, log: Path) -> psutil.Process:
    """The descendant of ``root`` whose stdout is ``log``: a forked node process carries the
    fork server's command line, so its log file is what tells it apart."""
    found = []
    for child in psutil.Process(root).children(recursive=True):
        try:
            if any(Path(f.path) == log for f in child.open_files()):
                found.append(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    assert len(found) == 1, f"expected one process writing {log}, found {found}"
    return found[0]


async def _up(tmp_path: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *GOSSIP,
        "up",
        "--quiet",
        "--log-dir",
        str(tmp_path / "logs"),
        "--json",
        str(tmp_path / "run.json"),
        "--metrics-file",
        str(tmp_path / "run.jsonl"),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
        cwd=tmp_path,
    )


async def _kill_mid_run(tmp_path: Path, proc: asyncio.subprocess.Process, name: str) -> int:
    await _wait_mid_run(tmp_path / "run.jsonl", 3, proc)
    victim = _process_logging_to(proc.pid, tmp_path / "logs" / f"{name}.log")
    victim.send_signal(signal.SIGKILL)
    return victim.pid


@pytest.mark.parametrize(
    ("per_process", "victim", "fork"),
    [
        (1, "node-4", "--fork-server"),
        (3, "host-1", "--fork-server"),
        (1, "node-4", "--no-fork-server"),
    ],
    ids=["one-per-process", "host", "no-fork-server"],
)
async def test_a_node_process_killed_mid_run_is_restarted_and_the_run_reaches_eps_exactly(
    tmp_path: Path, per_process: int, victim: str, fork: str
) -> None:
    proc = await _up(
        tmp_path,
        *("--graph", "grid:3x3", "--rate", "30", "--until", "1e-9", fork),
        *("--nodes-per-process", str(per_process), "--timeout", "120"),
    )
    try:
        killed = await _kill_mid_run(tmp_path, proc, victim)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 180)
    finally:
        if proc.returncode is None:
            proc.kill()
    err = stderr.decode()
    assert proc.returncode == 0, err[-3000:]
    assert f"restart: {victim} exited with code -9 during the run" in err
    record: dict[str, Any] = json.loads((tmp_path / "run.json").read_text())
    assert record["reached"] is True
    assert record["failure"] is None
    assert record["mass_drift_rel"] <= 1e-9  # the restarted nodes recovered their exact state
    assert record["restarts"] == {victim: 1}
    restarts = [e for e in record["events"] if e["event"] == "restart"]
    assert [(e["process"], e["code"]) for e in restarts] == [(victim, -9)]
    assert f"{victim} x1" in stdout.decode()
    # Each node of the killed process started twice, on the same address both times.
    text = (tmp_path / "logs" / f"{victim}.log").read_text()
    starts = re.findall(r"node (\d+) \((\S+), (tcp://[^)]+)\)", text)
    assert len(starts) == 2 * (3 if per_process == 3 else 1), text[-2000:]
    by_name: dict[str, set[str]] = {}
    for _, name, address in starts:
        by_name.setdefault(name, set()).add(address)
    assert all(len(addresses) == 1 for addresses in by_name.values()), by_name
    assert not psutil.pid_exists(killed)  # reaped: the restart is a new process


async def test_a_node_that_crashes_more_than_max_restarts_fails_the_run_with_its_json(
    tmp_path: Path,
) -> None:
    proc = await _up(
        tmp_path,
        *("--graph", "grid:3x3", "--rate", "30", "--until", "1e-9", "--max-restarts", "0"),
    )
    try:
        await _kill_mid_run(tmp_path, proc, "node-4")
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 180)
    finally:
        if proc.returncode is None:
            proc.kill()
    err = stderr.decode()
    assert proc.returncode == 1, err[-3000:]
    assert "node-4 exited with code -9 during the run after 0 restart(s)" in err
    assert "--max-restarts 0" in err
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["reached"] is False
    assert record["stop_reason"] == "failed"
    assert "node-4 exited with code -9" in record["failure"]
    assert record["restarts"] == {}
    assert [e["event"] for e in record["events"]] == ["failure"]
    assert record["graph"] == "grid:3x3"
    assert record["nodes"] == 9
    # No final reports: the final error is unknown, and only the last estimate is given.
    assert record["final_error"] is None
    assert record["last_error_estimate"] is not None
    assert "failed" in stdout.decode()
    assert "node-4 exited" in stdout.decode()


@pytest.mark.parametrize("security", [(), ("--insecure",)], ids=["curve", "insecure"])
async def test_a_node_restarted_on_a_new_address_is_followed_by_its_neighbours(
    tmp_path: Path, security: tuple[str, ...]
) -> None:
    proc = await _up(
        tmp_path,
        *("--graph", "grid:3x3", "--rate", "30", "--until", "1e-9", "--timeout", "120"),
        "--restart-on-new-address",
        *security,
    )
    try:
        await _kill_mid_run(tmp_path, proc, "node-4")  # the centre: four neighbours
        _, stderr = await asyncio.wait_for(proc.communicate(), 180)
    finally:
        if proc.returncode is None:
            proc.kill()
    err = stderr.decode()
    assert proc.returncode == 0, err[-3000:]
    record: dict[str, Any] = json.loads((tmp_path / "run.json").read_text())
    assert record["reached"] is True
    assert record["mass_drift_rel"] <= 1e-9
    assert record["restarts"] == {"node-4": 1}
    logs = tmp_path / "logs"
    text = (logs / "node-4.log").read_text()
    addresses = [a for _, _, a in re.findall(r"node (\d+) \((\S+), (tcp://[^)]+)\)", text)]
    assert len(addresses) == 2, text[-2000:]
    assert addresses[0] != addresses[1]
    final = json.loads(text.strip().splitlines()[-1])
    assert final["address"] == addresses[1]
    # Its neighbours' requests reached it at the new address, each neighbour moved its edge.
    assert final["counters"]["served"] > 0
    assert final["counters"]["rejected"] == 0
    for name in ("node-1", "node-3", "node-5", "node-7"):
        report = json.loads((logs / f"{name}.log").read_text().strip().splitlines()[-1])
        assert report["counters"]["moved"] == 1, name
        assert report["counters"]["forged"] == 0, name
