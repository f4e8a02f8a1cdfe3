"""``gossip up`` survives its broker: kill -9 of the embedded mosquitto (restarted by ``gossip
up`` on its port, with its passwords and ACL) or of an external one (restarted by the test on
the same port, as a restart policy would) mid-run, and the run still reaches eps, exactly.

Every process is real (``gossip up`` as a subprocess, its node processes, mosquitto); the
test waits for events in the run's metrics file, not for seconds.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest
from system_tools import require_mosquitto
from test_cli_supervise import _up, _wait_mid_run

from continuized.coordinator.machine.children import spawn, stop_process
from continuized.coordinator.machine.ports import free_port

pytestmark = [pytest.mark.cluster, pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(240)]

_RUN = ("--graph", "grid:4x4", "--rate", "100", "--until", "1e-9", "--timeout", "120")


def _descendants(root: int) -> list[psutil.Process]:
    return psutil.Process(root).children(recursive=True)


def _check_record(tmp_path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((tmp_path / "run.json").read_text())
    assert record["reached"] is True
    assert record["failure"] is None
    assert record["complete"] is True
    assert record["mass_drift_rel"] is not None
    assert record["mass_drift_rel"] <= 1e-9  # measured on every final report: exact
    assert record["final_error"] is not None
    return record


async def test_the_embedded_mosquitto_killed_mid_run_is_restarted_and_the_run_is_exact(
    tmp_path: Path,
) -> None:
    require_mosquitto()
    proc = await _up(tmp_path, *_RUN, "--embedded-broker", "mosquitto")
    try:
        await _wait_mid_run(tmp_path / "run.jsonl", 3, proc)
        everyone = _descendants(proc.pid)
        brokers = [p for p in everyone if p.name() == "mosquitto"]
        assert len(brokers) == 1, everyone
        brokers[0].send_signal(signal.SIGKILL)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), 180)
    finally:
        if proc.returncode is None:
            proc.kill()
    err = stderr.decode()
    assert proc.returncode == 0, err[-3000:]
    assert "restart: the mosquitto broker was killed by signal 9 during the run" in err
    record = _check_record(tmp_path)
    assert record["restarts"] == {"broker": 1}
    assert "broker x1" in stdout.decode()
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in everyone)


async def test_an_external_mosquitto_killed_and_restarted_on_its_port_loses_no_run(
    tmp_path: Path,
) -> None:
    mosquitto = require_mosquitto()
    port = free_port("127.0.0.1")
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    broker = await spawn([mosquitto, "-c", str(conf)], log=tmp_path / "mosquitto.log")
    proc = None
    try:
        proc = await _up(tmp_path, *_RUN, "--broker", f"mqtt://127.0.0.1:{port}", "--insecure")
        await _wait_mid_run(tmp_path / "run.jsonl", 3, proc)
        everyone = _descendants(proc.pid)
        broker.send_signal(signal.SIGKILL)
        await broker.wait()
        await asyncio.sleep(2.0)  # the outage: every report of these 2 s has nowhere to go
        broker = await spawn([mosquitto, "-c", str(conf)], log=tmp_path / "mosquitto.log")
        _, stderr = await asyncio.wait_for(proc.communicate(), 180)
        err = stderr.decode()
        assert proc.returncode == 0, err[-3000:]
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
        await stop_process(broker)
    record = _check_record(tmp_path)
    assert record["restarts"] == {}  # not ours to restart
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in everyone)
