"""A standing cluster: three runs in a row on one set of node processes, each exact; secured,
two runs submitted by the broker's operator account (slow).

Real processes on loopback and a real mosquitto: ``gossip coordinator --standing``, three
``gossip node --standing`` hosts of two nodes each (cycle:6; the first host on fixed ports,
which each run binds again), and ``gossip submit`` for each run, with another algorithm,
rate and seed every time. Between two runs, a submission with a bad value is refused, naming
the value, and the coordinator stays.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import zmq
from system_tools import require_mosquitto

from continuized.coordinator.local.broker import BrokerAuth, RunningBroker, mosquitto_broker
from continuized.coordinator.mqtt.auth import write_broker_auth
from continuized.gossip.files.keys import COORDINATOR, init_keys, load_mqtt_secret

pytestmark = [pytest.mark.cluster, pytest.mark.broker, pytest.mark.timeout(120)]

GRAPH, HOSTS, K = "cycle:6", 3, 2
EPS = 1e-6
RUNS = [  # algorithm, rate, values: each run differs from the one before
    ("arg", 300.0, "gaussian:1"),
    ("rg", 500.0, "gaussian:2"),
    ("arg", 400.0, "uniform:3"),
]


def free_ports(count: int) -> int:
    """A port P such that P .. P+count-1 were free just now (fixed binds, bound every run)."""
    for _ in range(50):
        with zmq.Context() as ctx:
            socks = [ctx.socket(zmq.ROUTER) for _ in range(count)]
            try:
                base = socks[0].bind_to_random_port("tcp://127.0.0.1", 20000, 60000)
                for i, sock in enumerate(socks[1:], 1):
                    sock.bind(f"tcp://127.0.0.1:{base + i}")
                return base
            except zmq.ZMQError:
                continue
            finally:
                for sock in socks:
                    sock.close(0)
    raise AssertionError("no run of free ports")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}


async def _gossip(*args: str, cwd: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "continuized.cli.app",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
        cwd=cwd,
    )


async def _submit(broker: str, cwd: Path, *args: str) -> tuple[int, str, str]:
    # The coordinator may still be starting: it is waited for (its retained presence).
    proc = await _gossip(
        "submit", "--broker", broker, "--wait", "60", "--standing-wait", "30", *args, cwd=cwd
    )
    async with asyncio.timeout(70):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_three_runs_on_the_same_standing_nodes(
    tmp_path: Path, mosquitto: RunningBroker
) -> None:
    await _three_runs(tmp_path, mosquitto.url, RUNS)


@pytest.mark.slow
async def test_secure_standing_nodes_take_runs_submitted_by_the_operator(tmp_path: Path) -> None:
    # The brokers' own ACL and passwords (gossip keys init's): the operator submits.
    init_keys(tmp_path / "keys", [f"node-{k}" for k in range(HOSTS * K)], zmq.curve_keypair)
    secret = load_mqtt_secret(tmp_path / "keys" / COORDINATOR / "mqtt.secret")
    auth = BrokerAuth(*write_broker_auth(tmp_path / "mqtt", secret, HOSTS * K))
    async with mosquitto_broker(require_mosquitto(), auth=auth) as broker:
        await _three_runs(tmp_path, broker.url, RUNS[:2], keys=tmp_path / "keys")


async def _three_runs(
    tmp_path: Path,
    broker: str,
    runs: list[tuple[str, float, str]],
    keys: Path | None = None,
) -> None:
    """Submit ``runs`` one after the other to a standing coordinator and its standing hosts."""
    secured = [] if keys is None else ["--keys", str(keys / COORDINATOR)]
    port = free_ports(1)
    base = free_ports(K)
    coordinator = await _gossip(
        *("coordinator", "--standing", "--graph", GRAPH, "--broker", broker, *secured),
        *("--bind", f"tcp://127.0.0.1:{port}", "--values", "onehot", "--until", str(EPS)),
        *("--start-delay", "0.5"),
        cwd=tmp_path,
    )
    hosts = []
    for j in range(HOSTS):
        where = (
            ["--bind", f"tcp://127.0.0.1:{base}", "--advertise", "127.0.0.1"]
            if j == 0
            else ["--host", "127.0.0.1"]
        )
        hosts.append(
            await _gossip(
                *("node", "--standing", "--coordinator", f"tcp://127.0.0.1:{port}", *where),
                *("--name", f"h{j}", "--nodes-per-process", str(K), "--seed", str(10 * j)),
                *("--retry-timeout", "0.05", "--drain", "0.2", "--log-level", "warning"),
                *(
                    ()
                    if keys is None
                    else [a for k in range(K) for a in ("--keys", str(keys / f"node-{j * K + k}"))]
                ),
                cwd=tmp_path,
            )
        )
    pids = [h.pid for h in hosts]
    try:
        records = []
        for i, (algorithm, rate, values) in enumerate(runs):
            out = tmp_path / f"run{i}.json"
            code, _, err = await _submit(
                broker,
                tmp_path,
                *secured,
                *("--algorithm", algorithm, "--rate", str(rate), "--values", values),
                *("--json", str(out)),
            )
            assert code == 0, err[-2000:]
            records.append(json.loads(out.read_text()))
            if i == 0:  # a bad value is named, and the coordinator serves the next run
                code, _, err = await _submit(broker, tmp_path, *secured, "--rate", "0")
                assert code == 2
                assert "--rate must be" in err, err
                assert "got 0.0" in err, err
        for record, (algorithm, rate, _) in zip(records, runs, strict=True):
            assert record["reached"] is True
            assert record["stop_reason"] == "reached"
            assert record["algorithm"] == algorithm
            assert record["rate_asked"] == rate
            assert record["complete"] is True
            assert record["missing_finals"] == []
            assert record["final_error"] <= EPS
            assert abs(record["mass_drift_rel"]) <= 1e-9
            assert record["exact_points"] > 0
        assert len({r["run_id"] for r in records}) == len(runs)
        # The same processes took part in every run.
        assert all(h.returncode is None for h in hosts)
        assert [h.pid for h in hosts] == pids
    finally:
        for proc in (*hosts, coordinator):
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        outs = []
        async with asyncio.timeout(30):
            for j, proc in enumerate(hosts):
                stdout, stderr = await proc.communicate()
                outs.append(stdout.decode())
                print(f"host h{j}'s log:", stderr.decode()[-3000:], sep="\n")  # shown on failure
            _, stderr = await coordinator.communicate()
            print("the coordinator's log:", stderr.decode()[-6000:], sep="\n")
    # Each host printed its two nodes' final reports once per run, then left on SIGTERM.
    for text in outs:
        finals = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        assert len(finals) == K * len(runs)
        assert all(f["final"] is True for f in finals)
    assert all(h.returncode == 0 for h in hosts)
