"""``gossip up`` on an emulated LAN warns of a rate above the LAN rule and of skewed clocks.

Real processes on loopback, three nodes per process ("per host"), each process's frames held
by the LAN emulation of ``--fault`` and its clock offset by ``skew_ms`` (drawn per host from
its name: the same every run), here by up to +-250 ms: past what the shared t tolerates at
this rate. The coordinator's warning comes from the nodes' own bounds on their neighbours'
offsets (their exchanges' round trips), so it names two nodes on different hosts and the
offset between the two hosts' clocks. The sums stay exact under the skew all the same. The
rate warning quotes the network's idle round trip, not the loaded one.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

import pytest

from continuized.coordinator.figures.lanrule import RATE_K, rate_ceiling, skew_tolerance
from continuized.node.transport.faults import FaultSpec

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.solo, pytest.mark.timeout(240)]

GRAPH, N, K = "grid:3x3", 9, 3
EPS = 1e-6
_SKEW = re.compile(
    r"the clock of node \d+ \((?P<peer>[^)]+)\) is (?P<ms>[0-9.]+) \+- (?P<err>[0-9.]+) ms "
    r"(?P<side>ahead of|behind) that of node \d+ \((?P<node>[^)]+)\) \(measured by their "
    r"exchanges' round trips\), past the (?P<tol>[0-9.]+) ms"
)
_OFFSET = re.compile(r"this host's wall clock is offset by (?P<ms>[-+0-9.]+) ms")
_RATE = re.compile(r"above the LAN rule .*?: [0-9.]+ \* \d+ nodes / (?P<rtt>[0-9.]+) ms")


async def gossip_up(tmp_path: Path, rate: float, fault: str, give_up: float) -> tuple[int, str]:
    """Run ``gossip up`` to eps; return its exit code and its stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    proc = await asyncio.create_subprocess_exec(
        *(
            sys.executable,
            "-m",
            "continuized.cli.app",
            "up",
            "--graph",
            GRAPH,
            "--nodes-per-process",
            "3",
        ),
        *("--rate", str(rate), "--until", str(EPS), "--quiet", "--timeout", str(give_up)),
        *("--json", str(tmp_path / "run.json"), "--node-arg=--fault", f"--node-arg={fault}"),
        *("--log-dir", str(tmp_path / "logs")),
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
    # The hosts' offsets, as the nodes will draw them (the run is secure: host j's first node
    # is node-3j, after its key). +-250 ms spreads them by about 390 ms: past the 225 ms
    # tolerated (a warning), within the ~10 mean gaps between a node's activations where ARG
    # still converges (at +-500 ms, 17 gaps, a loaded CI machine saw it diverge).
    offsets = [FaultSpec(skew_ms=250).clock_offset(None, f"node-{K * j}") for j in range(3)]
    spread = max(offsets) - min(offsets)
    assert spread > skew_tolerance(N, rate) + 0.01  # worth a warning
    assert spread < 2 * skew_tolerance(N, rate)  # ... and still inside the model's reach
    code, stderr = await gossip_up(
        tmp_path, rate, "latency_ms=1,jitter_ms=0.2,drop=0.001,skew_ms=250", 120
    )
    assert code == 0, stderr[-2000:]
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["reached"] is True
    assert summary["complete"] is True
    assert summary["mass_drift_rel"] <= 1e-9
    assert "LAN rule" not in stderr  # 100/s: under the rule unless the round trip passes 13 ms
    # The hosts' offsets as they set them (each host's log says), and the warning: once, two
    # nodes of different hosts, the offset between these hosts' clocks within its bound.
    set_ms = {j: _host_offset_ms(tmp_path / "logs" / f"host-{j}.log") for j in range(3)}
    assert [set_ms[j] for j in range(3)] == pytest.approx([o * 1e3 for o in offsets], abs=0.1)
    said = [m for m in (_SKEW.search(line) for line in stderr.splitlines()) if m]
    assert len(said) == 1, stderr[-3000:]
    found = said[0]
    peer, node = _host(found["peer"]), _host(found["node"])
    truth = set_ms[peer] - set_ms[node]  # the peer's clock less the node's
    assert abs(truth) > skew_tolerance(N, rate) * 1e3  # really past the tolerance
    assert found["side"] == ("ahead of" if truth > 0 else "behind")
    assert abs(float(found["ms"]) - abs(truth)) <= min(10.0, float(found["err"]) + 0.5)
    assert float(found["tol"]) == pytest.approx(skew_tolerance(N, rate) * 1e3, abs=0.1)


async def test_a_rate_above_the_lan_rule_is_warned_of(tmp_path: Path) -> None:
    # 5 ms each way (+-1): the idle round trip is 8 ms at the least, where the rule's ceiling
    # is 169/s, well under this rate (405/s).
    rate = 3 * rate_ceiling(N, 10.0)
    assert rate > 2 * RATE_K * N / 0.010
    _, stderr = await gossip_up(tmp_path, rate, "latency_ms=5,jitter_ms=1", 20)
    found = _RATE.search(stderr)
    assert found is not None, stderr[-2000:]
    # The round trip it judged by is the emulated LAN's, measured (at least the 8 ms set), and
    # the nodes' low tail: at three times the ceiling the exchanges queue for busy peers, and
    # their median round trip is longer.
    rtt = float(found["rtt"])
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["rtt_p50_ms"] is not None
    assert 8.0 <= rtt < summary["rtt_p50_ms"], (found[0], summary["rtt_p50_ms"])


def _host_offset_ms(log: Path) -> float:
    """The clock offset (ms) a host's log says it set."""
    found = _OFFSET.search(log.read_text())
    assert found is not None, log.read_text()[-2000:]
    return float(found["ms"])


def _host(name: str) -> int:
    """The host (process) of a node, by name: ``host-<j>-<i>``, or, secure, ``node-<k>`` (host
    j holds the next K keys, in order: coordinator.local.launcher)."""
    hosted = re.fullmatch(r"host-(\d+)-\d+", name)
    if hosted:
        return int(hosted[1])
    keyed = re.fullmatch(r"node-(\d+)", name)
    assert keyed is not None, name
    return int(keyed[1]) // K
