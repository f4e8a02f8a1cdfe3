"""Secure against ``--insecure`` at 1,024 / 2,048 / 4,096 nodes in host mode, in the same run.

Run with ``python benchmarks/bench_scale.py --sizes 32x32 32x64 --rounds 1`` (each case is one
``gossip up`` of about a minute). Every case runs the real command line
(``python -m continuized.cli.app up --graph grid:RxC --nodes-per-process K ...``) as a
subprocess, secure and ``--insecure`` alternating (round by round) so that a machine shared
with others loads both alike, and prints, per case:

* start: seconds from the command to t = 0 (the epoch the coordinator fixed, from the
  run's metrics file);
* registration: seconds from the first host process's ``registering`` log line to the
  coordinator's bootstrap (its ``start`` record);
* the run summary's achieved rate against the asked one, round trip p50 / p99 (medians of the
  nodes' own percentiles, over the nodes that measured them), the activations, how long a
  typical tick waited for its jump (``wait_p50``: a cluster that keeps up waits about a round
  trip), the exact points, the final reports that came;
* CPU: the node processes' CPU seconds per node per second of run (in % of a core), and the
  broker's and the coordinator's (the ``gossip up`` process) in % of a core, sampled from
  /proc (psutil) over the whole command;
* the machine's load average at the start and the end of the case.

Before the first case and after the last, it measures the machine's raw pyzmq capacity (round
trips a second between two processes, 30 in flight: :mod:`raw_zmq`), the baseline in the same
run that tells one machine's figures from another's: a cluster that keeps up at 3,000/s on one
machine may not on a machine with half this figure.

A figure the run did not measure prints ``unknown``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from raw_zmq import capacity_samples


@dataclass
class Case:
    """One ``gossip up`` run and what it measured."""

    size: str
    secure: bool
    per_process: int
    rate: float
    timeout: float
    start_s: float | None = None
    register_s: float | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    node_cpu: float = 0.0  # CPU seconds of the node processes
    broker_cpu: float = 0.0
    coordinator_cpu: float = 0.0
    wall_s: float = 0.0  # the command's wall time
    load: tuple[float, float] = (0.0, 0.0)
    error: str = ""

    @property
    def nodes(self) -> int:
        rows, cols = self.size.split("x")
        return int(rows) * int(cols)


def _role(proc: psutil.Process) -> str:
    """``broker`` for mosquitto, else ``node``: the node hosts and the idle fork server."""
    try:
        return "broker" if "mosquitto" in proc.name() else "node"
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "node"


async def _sample(top: psutil.Process, cpu: dict[int, tuple[str, float]]) -> None:
    """Keep the latest CPU seconds of every descendant of ``top``, by pid, until cancelled."""
    while True:
        with contextlib.suppress(psutil.NoSuchProcess):
            for proc in top.children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    times = proc.cpu_times()
                    cpu[proc.pid] = (
                        cpu[proc.pid][0] if proc.pid in cpu else _role(proc),
                        times.user + times.system,
                    )
            times = top.cpu_times()
            cpu[top.pid] = ("coordinator", times.user + times.system)
        await asyncio.sleep(0.5)


def _registration(log_dir: Path, metrics: Path) -> float | None:
    """Seconds from the first ``registering`` log line of a host to the bootstrap."""
    first = None
    for path in log_dir.glob("host-*.log"):
        with contextlib.suppress(OSError):
            for line in path.read_text(errors="replace").splitlines():
                if "registering" in line:
                    stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                    first = stamp if first is None else min(first, stamp)
                    break
    start = _record(metrics, "start")
    if first is None or start is None:
        return None
    return float(start["wall"]) - first


def _record(metrics: Path, kind: str) -> dict[str, Any] | None:
    with contextlib.suppress(OSError):
        for line in metrics.read_text().splitlines():
            record = json.loads(line)
            if record.get("kind") == kind:
                return dict(record)
    return None


async def run_case(case: Case, tmp: Path) -> Case:
    """Run ``gossip up`` for ``case`` and fill in what it measured."""
    work = tmp / f"{case.size}-{'secure' if case.secure else 'insecure'}-{time.time_ns()}"
    work.mkdir()
    metrics, out = work / "metrics.jsonl", work / "summary.json"
    args = [
        sys.executable, "-m", "continuized.cli.app", "up",
        "--graph", f"grid:{case.size}", "--rate", f"{case.rate:g}", "--until", "1e-30",
        "--timeout", f"{case.timeout:g}", "--nodes-per-process", str(case.per_process),
        "--metrics-file", str(metrics), "--json", str(out), "--log-dir", str(work / "logs"),
        "--quiet",
    ] + ([] if case.secure else ["--insecure"])  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    env["TMPDIR"] = str(work)
    case.load = (os.getloadavg()[0], 0.0)
    began = time.time()
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=work, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    cpu: dict[int, tuple[str, float]] = {}
    sampler = asyncio.create_task(_sample(psutil.Process(proc.pid), cpu))
    try:
        _, err = await proc.communicate()
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    case.wall_s = time.time() - began
    case.load = (case.load[0], os.getloadavg()[0])
    for role, seconds in cpu.values():
        if role == "broker":
            case.broker_cpu += seconds
        elif role == "coordinator":
            case.coordinator_cpu += seconds
        else:
            case.node_cpu += seconds
    start = _record(metrics, "start")
    if start is not None:
        case.start_s = float(start["epoch"]) - began
    case.register_s = _registration(work / "logs", metrics)
    if out.exists():
        case.summary = json.loads(out.read_text())
    else:
        lines = err.decode(errors="replace").strip().splitlines()
        case.error = lines[-1] if lines else f"exit code {proc.returncode}, no summary"
    return case


def _num(value: object, fmt: str) -> str:
    return "unknown" if not isinstance(value, int | float) else format(value, fmt)


def line(case: Case) -> str:
    """One case, as a line of the table."""
    s = case.summary
    run_s = max(case.wall_s - (case.start_s or 0.0), 1e-9)
    per_node = 100.0 * case.node_cpu / case.nodes / run_s
    finals = (
        f"{s['members'] - len(s['missing_finals'])}/{s['members']}"
        if s and "members" in s
        else "unknown"
    )
    mode = "secure" if case.secure else "insecure"
    if case.error and not s:
        return f"  {case.size:6} {mode:8} failed: {case.error}"
    return (
        f"  {case.size:6} {mode:8} start {_num(case.start_s, '5.1f')} s, registration "
        f"{_num(case.register_s, '5.1f')} s, rate {_num(s.get('rate_achieved'), '5.0f')}"
        f"/{case.rate:g}, rtt p50/p99 {_num(s.get('rtt_p50_ms'), '.1f')}/"
        f"{_num(s.get('rtt_p99_ms'), '.1f')} ms, activations {_num(s.get('activations'), ',')}, "
        f"ticks waited p50 {_num(s.get('wait_p50'), ',.0f')} t, exact points "
        f"{_num(s.get('exact_points'), 'd')}, finals {finals}, CPU per node "
        f"{per_node:.2f}% (broker {100 * case.broker_cpu / run_s:.0f}%, coordinator "
        f"{100 * case.coordinator_cpu / run_s:.0f}%), load {case.load[0]:.1f}->{case.load[1]:.1f}"
    )


async def raw_capacity(samples: int = 3, round_trips: int = 20_000) -> float:
    """The median of ``samples`` raw pyzmq capacities, in round trips a second (30 in flight)."""
    return float(np.median(await capacity_samples(samples, round_trips)))


async def main(argv: Sequence[str] | None = None) -> list[Case]:
    """Run the cases of the command line (``--help``), print a line each; return them."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["32x32", "32x64", "64x64"])
    parser.add_argument("--per-process", type=int, default=64)
    parser.add_argument("--rate", type=float, default=3000.0)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--modes", nargs="+", choices=["secure", "insecure"], default=["secure", "insecure"]
    )
    parser.add_argument("--keep", type=Path, help="keep each run's logs and files here")
    args = parser.parse_args(argv)
    for size in args.sizes:
        if not re.fullmatch(r"\d+x\d+", size):
            parser.error(f"--sizes takes RxC grids such as 32x32, got {size!r}")
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
    print(f"baseline: raw pyzmq capacity {await raw_capacity():,.0f} round trips/s", flush=True)
    cases = []
    modes = [mode == "secure" for mode in args.modes]
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for size in args.sizes:
            for r in range(args.rounds):
                # Alternate which mode goes first: a load that rises or falls hits both.
                for secure in modes if r % 2 == 0 else modes[::-1]:
                    case = Case(size, secure, args.per_process, args.rate, args.timeout)
                    cases.append(await run_case(case, work))
                    print(line(case), flush=True)
    print(f"baseline: raw pyzmq capacity {await raw_capacity():,.0f} round trips/s at the end")
    return cases


if __name__ == "__main__":
    asyncio.run(main())
