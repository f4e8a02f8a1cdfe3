"""``gossip up`` and ``gossip coordinator`` as commands: exit codes, files, Ctrl-C, restarts.

Every process here is real: the commands run as subprocesses, with their own node processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import aiomqtt
import psutil
import pytest

from continuized.coordinator.local.broker import RunningBroker
from continuized.coordinator.machine.ports import free_port

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(180)]

GOSSIP = [sys.executable, "-m", "continuized.cli.app"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    env["COLUMNS"] = "120"
    return env


def _port_is_free(port: int) -> bool:
    # SO_REUSEADDR, as every server sets it: connections closed a moment ago linger in
    # TIME_WAIT, which is no one's port; a listening socket still makes bind() fail.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _cmdline(proc: psutil.Process) -> str:
    """The command line of ``proc``, or "" if it has exited since it was listed."""
    try:
        return " ".join(proc.cmdline())
    except psutil.NoSuchProcess:
        return ""


async def test_gossip_up_writes_its_files_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    metrics = tmp_path / "run.jsonl"
    proc = await asyncio.create_subprocess_exec(
        *GOSSIP,
        "up",
        "--graph",
        "grid:2x2",
        "--rate",
        "100",
        "--until",
        "1e-6",
        "--json",
        str(out),
        "--metrics-file",
        str(metrics),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
        cwd=tmp_path,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    summary = json.loads(out.read_text())
    for key in (
        "reached",
        "t_eps",
        "wall_s",
        "activations",
        "rate_achieved",
        "final_error",
        "mass_drift_rel",
        "rtt_p50_ms",
        "rtt_p99_ms",
        "lag_p50",
        "lag_p99",
        "wait_p50",
        "wait_p99",
        "kept_up",
    ):
        assert key in summary
    assert summary["reached"] is True
    assert summary["mass_drift_rel"] <= 1e-9
    assert 0.0 <= summary["lag_p50"] <= summary["lag_p99"]
    assert 0.0 <= summary["wait_p50"] <= summary["wait_p99"]
    assert summary["kept_up"] in (True, False)
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert {"start", "point", "exact", "reached", "final"} <= {line["kind"] for line in lines}
    # t_eps is the exact curve's first crossing of eps, not the estimate's.
    first = next(p for p in lines if p["kind"] == "exact" and p["error"] <= 1e-6)
    assert summary["t_eps"] == first["t"]
    assert summary["wall_s"] == pytest.approx(first["t"] / 100)
    assert summary["exact_points"] > 0
    assert summary["exact_note"] == ""
    assert "t_eps_estimate" in summary
    text = stdout.decode()
    assert "final error" in text
    # One final error on the terminal: the progress line's is the table's, the exact one.
    final = f"{summary['final_error']:.3e}"
    assert f"error {final} (final)" in text
    assert f" {final} " in text.split("final error", 1)[1].splitlines()[0]
    assert "rate achieved" in text
    assert "jump lag p50 / p99 (t)" in text
    assert "tick wait p50 / p99 (t)" in text
    assert "exact curve points" in text


async def test_gossip_up_on_the_embedded_amqtt_is_secure_and_asks_to_install_nothing(
    tmp_path: Path,
) -> None:
    # A user who has mosquitto and picks amqtt was once told to install mosquitto; amqtt now
    # enforces the passwords and ACL itself (tests/coordinator/test_security.py).
    proc = await asyncio.create_subprocess_exec(
        *GOSSIP, "up", "--graph", "line:4", "--embedded-broker", "amqtt", "--quiet",
        "--metrics-file", str(tmp_path / "run.jsonl"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(), cwd=tmp_path,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 120)
    err = stderr.decode()
    assert proc.returncode == 0, err[-2000:]
    assert "(amqtt); starting 4 nodes" in err
    assert "install" not in err
    assert "INSECURE" not in err
    assert "reached eps" in stdout.decode()


async def test_gossip_up_in_host_mode_runs_the_nodes_in_fewer_processes(tmp_path: Path) -> None:
    out, logs = tmp_path / "run.json", tmp_path / "logs"
    proc = await asyncio.create_subprocess_exec(
        *GOSSIP,
        "up",
        "--graph",
        "line:5",
        "--nodes-per-process",
        "3",
        "--rate",
        "200",
        "--until",
        "1e-6",
        "--quiet",
        "--log-dir",
        str(logs),
        "--json",
        str(out),
        "--metrics-file",
        str(tmp_path / "m.jsonl"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
        cwd=tmp_path,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    summary = json.loads(out.read_text())
    assert summary["reached"] is True
    assert summary["mass_drift_rel"] <= 1e-9
    # Five nodes as two processes of 3 and 2 nodes, each node registered under its own name
    # (secure by default: the name of its own key, node-K).
    texts = {p.name: p.read_text() for p in logs.glob("host-*.log")}
    assert sorted(texts) == ["host-0.log", "host-1.log"]
    names = [set(re.findall(r"node \d+ \((node-\d+),", texts[f"host-{i}.log"])) for i in (0, 1)]
    assert [len(n) for n in names] == [3, 2]
    assert names[0] | names[1] == {f"node-{k}" for k in range(5)}


async def test_gossip_up_that_cannot_reach_eps_exits_1_with_a_message(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        *GOSSIP,
        "up",
        "--graph",
        "line:4",
        "--rate",
        "50",
        "--until",
        "1e-300",
        "--timeout",
        "2",
        "--quiet",
        "--metrics-file",
        str(tmp_path / "m.jsonl"),
        "--json",
        str(tmp_path / "run.json"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
        cwd=tmp_path,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 1
    assert "did not reach 1e-300 within --timeout 2 s" in stderr.decode()
    # The run failed, and its JSON says so and why.
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["reached"] is False
    assert record["stop_reason"] == "timeout"
    assert record["failure"].startswith("timeout: the error did not reach 1e-300")
    assert record["events"][-1]["event"] == "failure"
    assert record["restarts"] == {}


async def test_ctrl_c_on_gossip_up_leaves_no_process_and_no_port(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    proc = await asyncio.create_subprocess_exec(
        *GOSSIP,
        "up",
        "--graph",
        "line:4",
        "--rate",
        "50",
        "--until",
        "1e-300",
        "--timeout",
        "120",
        "--quiet",
        "--log-dir",
        str(logs),
        "--metrics-file",
        str(tmp_path / "m.jsonl"),
        "--json",
        str(tmp_path / "run.json"),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
        cwd=tmp_path,
    )
    assert proc.stderr is not None
    # Warnings (such as --until below the float floor) may come before the banner.
    early: list[str] = []
    while (found := re.search(r"mqtt://127\.0\.0\.1:(\d+)", "".join(early[-1:]))) is None:
        line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
        assert line, f"gossip up ended before its banner: {early}"
        early.append(line)
    assert any("below the smallest error float64" in e for e in early), early
    broker_port = int(found.group(1))
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    children: list[psutil.Process] = []
    while time.monotonic() < deadline:
        children = parent.children(recursive=True)
        # The node processes are forked by the fork server, so they carry its command line.
        forked = [c for c in children if "continuized.cli.forkserver" in _cmdline(c)]
        if len(forked) == 5 and all((logs / f"node-{k}.log").exists() for k in range(4)):
            texts = [(logs / f"node-{k}.log").read_text() for k in range(4)]
            if all("neighbours" in t for t in texts):  # bootstrapped: gossiping
                break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError(f"the nodes did not start: {children}")
    node_ports = [
        int(m)
        for k in range(4)
        for m in re.findall(r"tcp://127\.0\.0\.1:(\d+)\)", (logs / f"node-{k}.log").read_text())
    ]
    assert len(node_ports) == 4
    pids = [c.pid for c in children]
    proc.send_signal(signal.SIGINT)
    _, rest = await _communicate_or_kill(proc, 60)
    assert proc.returncode == 130, rest.decode()[-2000:]
    assert "interrupted" in rest.decode()
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["reached"] is False
    assert record["failure"].startswith("interrupted")
    for pid in pids:
        assert _gone(pid), f"process {pid} survived Ctrl-C"
    for port in [broker_port, *node_ports]:
        assert _port_is_free(port), f"port {port} is still bound"


async def _communicate_or_kill(
    proc: asyncio.subprocess.Process, seconds: float
) -> tuple[bytes, bytes]:
    """``proc.communicate()`` within ``seconds``; past them the process is killed (a failed test
    must not leave a ``gossip up`` behind) and the wait fails."""
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), seconds)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return stdout or b"", stderr or b""


async def _reports(
    broker: RunningBroker, cluster: str, seconds: float
) -> dict[int, dict[str, Any]]:
    """The latest report of every node seen within ``seconds``."""
    latest: dict[int, dict[str, Any]] = {}
    async with aiomqtt.Client(broker.host, broker.port) as client:
        await client.subscribe(f"gossip/{cluster}/node/+/state")
        try:
            async with asyncio.timeout(seconds):
                async for message in client.messages:
                    assert isinstance(message.payload, bytes)
                    report = json.loads(message.payload)
                    latest[report["node"]] = report
        except TimeoutError:
            pass
    return latest


@pytest.mark.broker
async def test_nodes_outlive_the_coordinator_and_a_new_one_resumes(
    mosquitto: RunningBroker, tmp_path: Path
) -> None:
    bind = f"tcp://127.0.0.1:{free_port()}"
    common = [
        "--graph",
        "line:4",
        "--broker",
        mosquitto.url,
        "--bind",
        bind,
        "--rate",
        "100",
        "--values",
        "onehot",
        "--cluster",
        "resume",
        "--metrics-period",
        "0.05",
        "--metrics-file",
        str(tmp_path / "run.jsonl"),
    ]
    first = await asyncio.create_subprocess_exec(
        *GOSSIP,
        "coordinator",
        *common,
        "--keep-running",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env=_env(),
    )
    logs = [tmp_path / f"n{k}.log" for k in range(4)]
    nodes = []
    for k in range(4):
        with logs[k].open("wb") as log:  # the child keeps its own copy of the descriptor
            nodes.append(
                await asyncio.create_subprocess_exec(
                    *GOSSIP,
                    "node",
                    "--coordinator",
                    bind,
                    "--host",
                    "127.0.0.1",
                    "--name",
                    f"n{k}",
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=log,
                    env=_env(),
                )
            )
    second = None
    try:
        before: dict[int, dict[str, Any]] = {}
        for _ in range(60):
            before = await _reports(mosquitto, "resume", 0.5)
            if len(before) == 4 and min(r["t"] for r in before.values()) > 10:
                break
        assert len(before) == 4, "the nodes never reported"
        first.kill()  # the coordinator dies without a word
        await first.wait()
        await asyncio.sleep(1.0)
        after = await _reports(mosquitto, "resume", 0.5)
        assert len(after) == 4, "the nodes stopped reporting without their coordinator"
        for k in range(4):
            assert after[k]["t"] > before[k]["t"] + 50  # 1.5 s at 100/s
            assert sum(after[k]["edges"].values()) > sum(before[k]["edges"].values())
        assert all(n.returncode is None for n in nodes)
        second = await asyncio.create_subprocess_exec(
            *GOSSIP,
            "coordinator",
            *common,
            "--until",
            "1e-6",
            "--json",
            str(tmp_path / "run.json"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=_env(),
        )
        _, err = await asyncio.wait_for(second.communicate(), 90)
        assert second.returncode == 0, err.decode()[-2000:]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(60):
                await asyncio.gather(*(n.wait() for n in nodes))
        codes = [n.returncode for n in nodes]
        said = "\n".join(f"n{k}: {log.read_text()[-1500:]}" for k, log in enumerate(logs))
        assert codes == [0, 0, 0, 0], f"the nodes exit 0 once stopped; their logs:\n{said}"
    finally:
        for p in [first, second, *nodes]:
            if p is not None and p.returncode is None:
                p.kill()
                await p.wait()
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["reached"] is True
    assert summary["mass_drift_rel"] <= 1e-9
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert kinds.count("start") == 1
    assert "resume" in kinds


async def _http_json(url: str) -> Any:
    import urllib.request

    def fetch() -> Any:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())

    return await asyncio.to_thread(fetch)


async def test_gossip_up_holds_its_dashboard_and_ends_on_the_achieved_rate(
    tmp_path: Path,
) -> None:
    port = free_port()
    out = tmp_path / "run.json"
    proc = await asyncio.create_subprocess_exec(
        *GOSSIP,
        "up",
        "--graph",
        "grid:2x2",
        "--rate",
        "100",
        "--json",
        str(out),
        "--dashboard-port",
        str(port),
        "--dashboard-runs-dir",
        str(tmp_path / "runs"),
        "--hold",
        "forever",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
        cwd=tmp_path,
    )
    assert proc.stderr is not None
    try:
        # Wait for the event, not for a time: the run is over and the dashboard held.
        async with asyncio.timeout(120):
            while b"dashboard kept up" not in await proc.stderr.readline():
                assert proc.returncode is None
        summary = json.loads(out.read_text())
        assert summary["reached"] is True
        # The run's nodes are gone; the page still answers, with the finished run.
        async with asyncio.timeout(30):
            while True:
                try:
                    served = await _http_json(f"http://127.0.0.1:{port}/api/summary")
                    break
                except OSError:
                    await asyncio.sleep(0.1)
        assert served["reached"] is True
        assert served["t_eps"] == pytest.approx(summary["t_eps"])
        assert served["phase"] == "done"
        runs = await _http_json(f"http://127.0.0.1:{port}/api/runs")
        assert summary["run_id"] in {r["run_id"] for r in runs}
        assert proc.returncode is None  # held until Ctrl-C
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
    stdout, _ = await _communicate_or_kill(proc, 30)
    assert proc.returncode == 0
    # The final progress line shows the run's achieved rate, not the 0 of stopped nodes.
    speeds = re.findall(r"(\d+) act/s", stdout.decode())
    assert speeds, stdout.decode()
    assert int(speeds[-1]) == round(summary["rate_achieved"])
    assert summary["rate_achieved"] > 0


async def test_gossip_up_runs_from_a_folder_with_packages_of_the_same_names(
    tmp_path: Path,
) -> None:
    """A user's project may hold its own ``cli/`` package, ``node.py`` or ``gossip.py``: the
    processes that ``gossip up`` starts must import this package's modules, not those of the
    folder it runs in (once, ``python -m cli.forkserver`` took the user's ``cli`` and no node
    started)."""
    for name in ("cli", "coordinator"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('the user\\'s {name}')\n")
    for name in ("node", "gossip"):
        (tmp_path / f"{name}.py").write_text(f"raise ImportError('the user\\'s {name}.py')\n")
    script = Path(sys.executable).parent / "gossip"  # what a user runs: the console script
    assert script.exists(), f"no console script at {script}"
    proc = await asyncio.create_subprocess_exec(
        str(script), "up", "--graph", "line:4", "--quiet",
        "--metrics-file", str(tmp_path / "run.jsonl"), "--json", str(tmp_path / "run.json"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(), cwd=tmp_path,
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    assert json.loads((tmp_path / "run.json").read_text())["reached"] is True
