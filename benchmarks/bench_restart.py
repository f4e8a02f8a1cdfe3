"""Time to eps of ``gossip up`` with one node process killed by SIGKILL mid-run, against the
same command undisturbed.

Run with ``python benchmarks/bench_restart.py`` (about 2 minutes on two cores). Each repeat
runs the real command line (``python -m cli.app up ...``) twice: once undisturbed (the
baseline), once with the process of ``--victim`` killed with SIGKILL as soon as the coordinator
has measured ``--after`` errors (the launcher restarts it on its address; it recovers its state
from its neighbours). Printed: per run the wall time and t to eps, the restarts and the mass
drift; then the ratio of the medians, killed / undisturbed (issue target: at most 1.5).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil


def _kinds(metrics: Path) -> list[str]:
    kinds = []
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            try:
                kinds.append(json.loads(line)["kind"])
            except (ValueError, KeyError):
                continue
    return kinds


async def _kill_when_running(
    proc: asyncio.subprocess.Process, metrics: Path, log: Path, after: int
) -> None:
    """SIGKILL the descendant of ``proc`` writing ``log`` once ``after`` errors are measured."""
    while True:
        kinds = _kinds(metrics)
        if "start" in kinds and kinds.count("point") >= after:
            break
        if proc.returncode is not None:
            return
        await asyncio.sleep(0.05)
    if "reached" in kinds:
        print("warning: the run reached eps before the kill", file=sys.stderr)
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            if any(Path(f.path) == log for f in child.open_files()):
                child.send_signal(signal.SIGKILL)
                return
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    print(f"warning: no process writes {log}", file=sys.stderr)


async def _run(args: argparse.Namespace, kill: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        out, metrics, logs = Path(tmp, "run.json"), Path(tmp, "run.jsonl"), Path(tmp, "logs")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "cli.app", "up", "--quiet", "--graph", args.graph),
            *("--rate", str(args.rate), "--until", str(args.until), "--timeout", "300"),
            *("--json", str(out), "--metrics-file", str(metrics), "--log-dir", str(logs)),
            *("--dashboard-runs-dir", str(Path(tmp, "runs"))),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=tmp,
        )
        killer = None
        if kill:
            log = logs / f"{args.victim}.log"
            killer = asyncio.create_task(_kill_when_running(proc, metrics, log, args.after))
        _, stderr = await proc.communicate()
        if killer is not None:
            await killer
        if proc.returncode != 0:
            raise SystemExit(f"gossip up failed ({proc.returncode}): {stderr.decode()[-2000:]}")
        return _read_json(out)


def _read_json(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_text())
    return record


async def main() -> None:
    """Run the repeats and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="grid:4x4")
    parser.add_argument("--rate", type=float, default=60.0)
    parser.add_argument("--until", type=float, default=1e-9)
    parser.add_argument("--victim", default="node-5", help="process to kill (its log's name)")
    parser.add_argument("--after", type=int, default=5, help="errors measured before the kill")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(
        f"gossip up --graph {args.graph} --rate {args.rate:g} --until {args.until:g}; "
        f"kill -9 {args.victim} after {args.after} measured errors; {args.repeats} repeats"
    )
    walls: dict[bool, list[float]] = {False: [], True: []}
    ts: dict[bool, list[float]] = {False: [], True: []}
    for r in range(args.repeats):
        for kill in (False, True):
            began = time.perf_counter()
            rec = await _run(args, kill)
            walls[kill].append(rec["wall_s"])
            ts[kill].append(rec["t_eps"])
            print(
                f"repeat {r} {'killed     ' if kill else 'undisturbed'}: reached {rec['reached']}"
                f", wall to eps {rec['wall_s']:.2f} s, t_eps {rec['t_eps']:.1f}, restarts "
                f"{rec['restarts']}, mass drift {rec['mass_drift_rel']:.1e} "
                f"(command {time.perf_counter() - began:.1f} s)"
            )
    wall_ratio = statistics.median(walls[True]) / statistics.median(walls[False])
    t_ratio = statistics.median(ts[True]) / statistics.median(ts[False])
    print(
        f"median wall to eps: undisturbed {statistics.median(walls[False]):.2f} s, killed "
        f"{statistics.median(walls[True]):.2f} s; ratio {wall_ratio:.2f} (target <= 1.5)"
    )
    print(f"median t_eps ratio killed / undisturbed: {t_ratio:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
