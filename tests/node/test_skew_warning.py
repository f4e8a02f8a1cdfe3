"""A node warns, once, of a neighbour's clock past what the shared t tolerates; so does the
coordinator, from the bounds the nodes report.

Real processes on loopback and a real mosquitto: cycle:4 on two hosts of two nodes each, every
node with a neighbour on the other host, and host h0's wall clock set 50 ms ahead
(``--fault offset_ms=50``: half the nodes). At 300 activations/s on 4 nodes the shared t
tolerates 33.3 ms. Each node bounds its neighbours' offsets with its own exchanges (the
replies' clock stamps, gossip.exchange.clockskew) and says so once, naming the offset, the
tolerance and the fix; the coordinator, which reads those bounds in the nodes' state reports,
says it once for the cluster, naming two nodes across the hosts and about 50 ms; the run stays
exact. Without the offset, all on one clock, nobody warns.
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

from continuized.coordinator.local.broker import RunningBroker
from continuized.gossip.exchange.clockskew import skew_tolerance

pytestmark = [pytest.mark.cluster, pytest.mark.broker, pytest.mark.solo, pytest.mark.timeout(120)]

GRAPH, N, K, RATE = "cycle:4", 4, 2, 300.0
OFFSET = 0.050  # seconds: host h0's clock ahead of h1's
_WARNING = re.compile(
    r"this host's clock is (?P<ms>[0-9.]+) ms (?P<side>behind|ahead of) neighbour \d+'s "
    r"\(\+-(?P<err>[0-9.]+) ms, from \d+ exchanges' round trips\), past the (?P<tol>[0-9.]+) ms"
)
_CLUSTER_WARNING = re.compile(  # the coordinator's
    r"the clock of node \d+ \((?P<peer>[^)]+)\) is (?P<ms>[0-9.]+) \+- (?P<err>[0-9.]+) ms "
    r"(?P<side>ahead of|behind) that of node \d+ \((?P<node>[^)]+)\) \(measured by their "
    r"exchanges' round trips\), past the (?P<tol>[0-9.]+) ms"
)


async def _gossip(*args: str, cwd: Path) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    return await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "continuized.cli.app", *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )


def _free_port() -> int:
    with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as probe:
        return probe.bind_to_random_port("tcp://127.0.0.1", 20000, 60000)


async def _run(
    tmp_path: Path, broker: str, offset_ms: float
) -> tuple[list[str], str, dict[str, Any]]:
    """One run of cycle:4 to eps, host h0's clock ``offset_ms`` ahead: each host's stderr, the
    coordinator's, and the run's summary."""
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
    return errs, coord_err.decode(), json.loads(summary.read_text())


async def test_each_node_warns_once_of_a_skewed_neighbour_and_the_run_stays_exact(
    tmp_path: Path, mosquitto: RunningBroker
) -> None:
    tolerance = skew_tolerance(N, RATE)
    assert tolerance + 0.010 < OFFSET  # surely past it: loopback's round trips are far shorter
    errs, coord_err, summary = await _run(tmp_path, mosquitto.url, OFFSET * 1e3)
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
    # The coordinator: once, from the nodes' reported bounds, two nodes across the hosts.
    said = [m for m in (_CLUSTER_WARNING.search(line) for line in coord_err.splitlines()) if m]
    assert len(said) == 1, coord_err[-3000:]
    found = said[0]
    assert {found["peer"][:3], found["node"][:3]} == {"h0-", "h1-"}, found[0]
    assert found["side"] == ("ahead of" if found["peer"].startswith("h0-") else "behind")
    assert abs(float(found["ms"]) - OFFSET * 1e3) <= min(10.0, float(found["err"]) + 0.5)
    assert float(found["tol"]) == pytest.approx(tolerance * 1e3, abs=0.1)
    assert "chrony" in coord_err


async def test_synchronised_clocks_give_no_warning(
    tmp_path: Path, mosquitto: RunningBroker
) -> None:
    errs, coord_err, summary = await _run(tmp_path, mosquitto.url, 0.0)
    assert summary["reached"] is True
    for err in errs:
        assert "this host's clock is" not in err, err[-3000:]
    assert "the clock of node" not in coord_err, coord_err[-3000:]  # one clock: no skew
