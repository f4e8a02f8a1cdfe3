"""``gossip up`` on an emulated LAN warns of a rate above the LAN rule and of skewed clocks.

Real processes on loopback, three nodes per process ("per host"), each process's frames held
by the LAN emulation of ``--fault`` and its clock offset by ``skew_ms`` (drawn per host from
its name: the same every run), here by up to +-350 ms: past what the shared t tolerates at
this rate. The sums stay exact under the skew all the same.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from coordinator.lanrule import RATE_K, SKEW_FLOOR, rate_ceiling, skew_tolerance
from node.faults import FaultSpec

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]

GRAPH, N = "grid:3x3", 9
EPS = 1e-6


async def gossip_up(tmp_path: Path, rate: float, fault: str, give_up: float) -> tuple[int, str]:
    """Run ``gossip up`` to eps; return its exit code and its stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "cli.app", "up", "--graph", GRAPH, "--nodes-per-process", "3"),
        *("--rate", str(rate), "--until", str(EPS), "--quiet", "--timeout", str(give_up)),
        *("--json", str(tmp_path / "run.json"), "--node-arg=--fault", f"--node-arg={fault}"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    async with asyncio.timeout(give_up + 60):
        _, stderr = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, stderr.decode()


async def test_skewed_hosts_end_exact_and_the_skew_is_warned_of(tmp_path: Path) -> None:
    rate = 100.0
    # The hosts' offsets, as the nodes will draw them (host j's first node is host-j-0).
    # +-350 ms spreads them by about 310 ms: past the 225 ms tolerated (a warning), within
    # the ~10 mean gaps between a node's activations where ARG still converges (at +-500 ms, 17
    # gaps, a loaded CI machine saw it diverge).
    offsets = [FaultSpec(skew_ms=350).clock_offset(None, f"host-{j}-0") for j in range(3)]
    spread = max(offsets) - min(offsets)
    assert spread > max(SKEW_FLOOR, skew_tolerance(N, rate)) + 0.01  # worth a warning
    assert spread < 2 * skew_tolerance(N, rate)  # ... and still inside the model's reach
    code, stderr = await gossip_up(
        tmp_path, rate, "latency_ms=1,jitter_ms=0.2,drop=0.001,skew_ms=350", 120
    )
    assert code == 0, stderr[-2000:]
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["reached"] is True
    assert summary["complete"] is True
    assert summary["mass_drift_rel"] <= 1e-9
    assert "clocks differ" in stderr, stderr[-2000:]
    assert "LAN rule" not in stderr  # 100/s: under the rule unless the round trip passes 13 ms


async def test_a_rate_above_the_lan_rule_is_warned_of(tmp_path: Path) -> None:
    # 5 ms each way: the round trip is 10 ms or more, and the rule's ceiling at most this.
    rate = 3 * rate_ceiling(N, 10.0)
    assert rate > 2 * RATE_K * N / 0.010
    _, stderr = await gossip_up(tmp_path, rate, "latency_ms=5,jitter_ms=1", 20)
    assert "above the LAN rule" in stderr, stderr[-2000:]
