"""A node warns, once, of a neighbour's clock past what the shared t tolerates.

Real processes on loopback and a real mosquitto: cycle:4 on two hosts of two nodes each, every
node with a neighbour on the other host, and host h0's wall clock set 250 ms ahead
(``--fault offset_ms=250``). At 100 activations/s on 4 nodes the shared t tolerates 100 ms.
Each node bounds its neighbours' offsets with its own exchanges (the replies' clock stamps,
gossip.exchange.clockskew) and says so once, naming the offset, the tolerance and the fix; the
run stays exact. Without the offset, nobody warns.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import zmq

from coordinator.broker import RunningBroker
from gossip.exchange.clockskew import skew_tolerance

pytestmark = [pytest.mark.cluster, pytest.mark.broker, pytest.mark.timeout(120)]

GRAPH, N, K, RATE = "cycle:4", 4, 2, 100.0
OFFSET = 0.250  # seconds: host h0's clock ahead of h1's
_WARNING = re.compile(
    r"this host's clock is (?P<ms>[0-9.]+) ms (?P<side>behind|ahead of) neighbour \d+'s "
    r"\(\+-(?P<err>[0-9.]+) ms, from \d+ exchanges' round trips\), past the (?P<tol>[0-9.]+) ms"
)


async def _gossip(*args: str, cwd: Path) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    return await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "cli.app", *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )


def _free_port() -> int:
    with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as probe:
        return probe.bind_to_random_port("tcp://127.0.0.1", 20000, 60000)


async def _run(tmp_path: Path, broker: str, offset_ms: float) -> tuple[list[str], dict[str, Any]]:
    """One run of cycle:4 to eps, host h0's clock ``offset_ms`` ahead: each host's stderr, and
    the run's summary."""
    port = _free_port()
    summary = tmp_path / f"run-{offset_ms:g}.json"
    coordinator = await _gossip(
        *("coordinator", "--graph", GRAPH, "--broker", broker, "--rate", str(RATE)),
        *("--bind", f"tcp://127.0.0.1:{port}", "--values", "gaussian:1", "--until", "1e-9"),
        *("--timeout", "40", "--json", str(summary)),
        cwd=tmp_path,
    )
    hosts = [
        await _gossip(
            *("node", "--coordinator", f"tcp://127.0.0.1:{port}", "--host", "127.0.0.1"),
            *("--name", f"h{j}", "--nodes-per-process", str(K), "--seed", str(j)),
            *(("--fault", f"offset_ms={offset_ms:g}") if j == 0 and offset_ms else ()),
            cwd=tmp_path,
        )
        for j in range(2)
    ]
    async with asyncio.timeout(90):
        errs = [(await h.communicate())[1].decode() for h in hosts]
        _, coord_err = await coordinator.communicate()
    assert coordinator.returncode == 0, coord_err.decode()[-2000:]
    return errs, json.loads(summary.read_text())


async def test_each_node_warns_once_of_a_skewed_neighbour_and_the_run_stays_exact(
    tmp_path: Path, mosquitto: RunningBroker
) -> None:
    tolerance = skew_tolerance(N, RATE)
    assert 2 * tolerance < OFFSET  # surely past it, whatever the round trips
    errs, summary = await _run(tmp_path, mosquitto.url, OFFSET * 1e3)
    assert summary["reached"] is True
    assert abs(summary["mass_drift_rel"]) <= 1e-9
    for j, err in enumerate(errs):
        warnings = [m for m in (_WARNING.search(line) for line in err.splitlines()) if m]
        assert len(warnings) == K, err[-3000:]  # once per node: each has a neighbour across
        for found in warnings:
            # h0's clock is ahead of its neighbours' on h1; h1's behind h0's.
            assert found["side"] == ("ahead of" if j == 0 else "behind")
            assert abs(float(found["ms"]) - OFFSET * 1e3) <= float(found["err"]) + 0.5
            assert float(found["tol"]) == pytest.approx(tolerance * 1e3, abs=0.1)
        assert "chrony" in err


async def test_synchronised_clocks_give_no_warning(
    tmp_path: Path, mosquitto: RunningBroker
) -> None:
    errs, summary = await _run(tmp_path, mosquitto.url, 0.0)
    assert summary["reached"] is True
    for err in errs:
        assert "this host's clock is" not in err, err[-3000:]
