"""A real ``gossip up`` in host mode reaches eps, and the decision is honest.

Real processes on loopback: the embedded broker, the coordinator, and the nodes hosted several
per process (each process publishes its nodes' reports one after another, so the reports are
staggered, as at 1,024 nodes). The exact final error (after the stop, nothing in flight) must
confirm the decision.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(240)]

EPS = 1e-6


async def test_host_mode_run_reaches_eps_and_the_exact_final_error_confirms_it(
    tmp_path: Path,
) -> None:
    out, metrics = tmp_path / "run.json", tmp_path / "m.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "continuized.cli.app", "up", "--graph", "grid:6x6"),
        *("--nodes-per-process", "12", "--rate", "600", "--until", str(EPS), "--quiet"),
        *("--timeout", "150", "--json", str(out), "--metrics-file", str(metrics)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), 220)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    summary = json.loads(out.read_text())
    assert summary["reached"] is True
    assert summary["stop_reason"] == "reached"
    assert summary["complete"] is True
    assert summary["mass_drift_rel"] <= 1e-9
    # The nodes gossip on between the decision and the stop and ARG's error is not monotone,
    # but a decision on stale or partial reports would show here as a final error far above.
    assert summary["final_error"] <= 10 * EPS
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    exact = [p for p in lines if p["kind"] == "exact"]
    reached = next(p for p in lines if p["kind"] == "reached")
    # t_eps is the exact curve's first point at or below eps, and the decision came after it.
    first = next(p for p in exact if p["error"] <= EPS)
    assert reached["exact"] is True
    assert reached["t_eps"] == first["t"] == summary["t_eps"]
    assert first["wall"] <= reached["wall"]
    assert reached["t_eps"] <= summary["final_t"]
