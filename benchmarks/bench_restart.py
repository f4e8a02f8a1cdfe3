"""Time to eps of ``gossip up`` with one node process killed by SIGKILL mid-run, against the
same command undisturbed.

Run with ``python benchmarks/bench_restart.py`` (about 2 minutes on two cores). Each repeat
runs the real command line (``python -m continuized.cli.app up ...``) twice: once undisturbed (the
baseline), once with the process of ``--victim`` killed with SIGKILL as soon as the coordinator
has measured ``--after`` errors (the launcher restarts it on its address; it recovers its state
from its neighbours). With ``--new-address`` a third run per repeat kills it the same way, and
the launcher restarts it on a fresh port (``gossip up --restart-on-new-address``): it tells its
neighbours its new address as it recovers. With ``--victim broker`` the embedded mosquitto is
killed instead (``gossip up --embedded-broker mosquitto`` restarts it on its port with its
passwords and ACL), and the outage is measured: from the kill until the new broker accepts
connections; the target is then on the wall time less the outage. Printed: per run the wall
time, t to eps, the rate achieved, the restarts and the mass drift; then the medians and their
ratios to the undisturbed run (issue target: at most 1.5), and the load average (the machine is
shared). t to eps is the run's exact curve's first crossing, and the wall time to eps
``t_eps / rate`` (the summary's ``wall_s``); a run without an exact curve has neither
(``unknown``, left out of the medians).
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


def _brokers(root: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(root).children(recursive=True) if p.name() == "mosquitto"]


def _listening(proc: psutil.Process) -> bool:
    try:
        return any(c.status == psutil.CONN_LISTEN for c in proc.net_connections("tcp"))
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


async def _kill_broker(proc: asyncio.subprocess.Process) -> float | None:
    """SIGKILL the embedded mosquitto of ``proc``; return the seconds until its successor
    listens (``None``: ``proc`` ended first)."""
    (broker,) = _brokers(proc.pid)
    broker.send_signal(signal.SIGKILL)
    killed = time.perf_counter()
    while proc.returncode is None:
        if any(b.pid != broker.pid and _listening(b) for b in _brokers(proc.pid)):
            return time.perf_counter() - killed
        await asyncio.sleep(0.02)
    return None


async def _kill_when_running(
    proc: asyncio.subprocess.Process, metrics: Path, log: Path, after: int
) -> float | None:
    """SIGKILL the descendant of ``proc`` writing ``log`` (or its broker, when ``log`` is
    ``broker.log``) once ``after`` errors are measured; the broker's outage in seconds."""
    while True:
        kinds = _kinds(metrics)
        if "start" in kinds and kinds.count("point") >= after:
            break
        if proc.returncode is not None:
            return None
        await asyncio.sleep(0.05)
    if "reached" in kinds:
        print("warning: the run reached eps before the kill", file=sys.stderr)
    if log.name == "broker.log":
        return await _kill_broker(proc)
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            if any(Path(f.path) == log for f in child.open_files()):
                child.send_signal(signal.SIGKILL)
                return None
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    print(f"warning: no process writes {log}", file=sys.stderr)
    return None


async def _run(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    """One ``gossip up`` run: ``undisturbed``, ``same`` or ``new`` (the victim's address)."""
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
        out, metrics, logs = Path(tmp, "run.json"), Path(tmp, "run.jsonl"), Path(tmp, "logs")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "continuized.cli.app", "up", "--quiet", "--graph", args.graph),
            *("--rate", str(args.rate), "--until", str(args.until), "--timeout", "300"),
            *("--json", str(out), "--metrics-file", str(metrics), "--log-dir", str(logs)),
            *("--dashboard-runs-dir", str(Path(tmp, "runs"))),
            *(("--restart-on-new-address",) if mode == "new" else ()),
            *(("--embedded-broker", "mosquitto") if args.victim == "broker" else ()),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=tmp,
        )
        killer = None
        if mode != "undisturbed":
            log = logs / f"{args.victim}.log"
            killer = asyncio.create_task(_kill_when_running(proc, metrics, log, args.after))
        _, stderr = await proc.communicate()
        outage = None if killer is None else await killer
        if proc.returncode != 0:
            raise SystemExit(f"gossip up failed ({proc.returncode}): {stderr.decode()[-2000:]}")
        record = _read_json(out)
        record["outage_s"] = outage
        record["decided_s"] = _decided(metrics)
        return record


def _decided(metrics: Path) -> float | None:
    """Seconds from the run's start to the coordinator's "reached" decision (metrics file)."""
    walls: dict[str, float] = {}
    for line in metrics.read_text().splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        walls.setdefault(item.get("kind", ""), item.get("wall", 0.0))
    if "start" not in walls or "reached" not in walls:
        return None
    return walls["reached"] - walls["start"]


def _read_json(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_text())
    return record


async def main() -> None:
    """Run the repeats and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="grid:4x4")
    parser.add_argument("--rate", type=float, default=60.0)
    parser.add_argument("--until", type=float, default=1e-9)
    parser.add_argument(
        "--victim", default="node-5", help="process to kill (its log's name), or broker"
    )
    parser.add_argument("--after", type=int, default=5, help="errors measured before the kill")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--new-address",
        action="store_true",
        help="also restart the victim on a fresh port (gossip up --restart-on-new-address)",
    )
    args = parser.parse_args()
    print(
        f"gossip up --graph {args.graph} --rate {args.rate:g} --until {args.until:g}; "
        f"kill -9 {args.victim} after {args.after} measured errors; {args.repeats} repeats"
    )
    modes = ["undisturbed", "same", "new"] if args.new_address else ["undisturbed", "same"]
    label = {"undisturbed": "undisturbed", "same": "same address", "new": "new address"}
    walls: dict[str, list[float]] = {m: [] for m in modes}
    outages: list[float] = []
    decided: dict[str, list[float]] = {m: [] for m in modes}
    ts: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(args.repeats):
        for mode in modes:
            began = time.perf_counter()
            rec = await _run(args, mode)
            if rec["outage_s"] is not None:
                outages.append(rec["outage_s"])
            if rec["decided_s"] is not None:
                decided[mode].append(rec["decided_s"] - (rec["outage_s"] or 0.0))
            if rec["t_eps"] is not None:
                # The target is on the wall time less the broker's outage (none for a node).
                walls[mode].append(rec["wall_s"] - (rec["outage_s"] or 0.0))
                ts[mode].append(rec["t_eps"])
            print(
                f"repeat {r} {label[mode]:<12}: reached {rec['reached']}, wall to eps "
                f"{_shown(rec['wall_s'], '.2f')} s, t_eps {_shown(rec['t_eps'], '.1f')} "
                f"(estimate {_shown(rec.get('t_eps_estimate'), '.1f')}), rate "
                f"{rec['rate_achieved'] or float('nan'):.0f}"
                f"/{rec['rate_asked']:g} per s, restarts {rec['restarts']}, mass drift "
                f"{rec['mass_drift_rel']:.1e}, broker outage {_shown(rec['outage_s'], '.2f')} s, "
                f"eps decided {_shown(rec['decided_s'], '.2f')} s after the start "
                f"(command {time.perf_counter() - began:.1f} s, "
                f"load {os.getloadavg()[0]:.1f})"
            )
    base_wall, base_t = (
        statistics.median(walls["undisturbed"]),
        statistics.median(ts["undisturbed"]),
    )
    for mode in modes:
        wall, t = statistics.median(walls[mode]), statistics.median(ts[mode])
        print(
            f"median {label[mode]:<12}: wall to eps {wall:.2f} s (x{wall / base_wall:.2f}), "
            f"t_eps {t:.1f} (x{t / base_t:.2f})"
            + ("" if mode == "undisturbed" else "; target <= 1.5x")
            + (" (wall less the outage)" if outages and mode != "undisturbed" else "")
        )
    if outages:
        print(f"broker outages: {', '.join(f'{o:.2f}' for o in outages)} s")
    if decided["undisturbed"]:
        base = statistics.median(decided["undisturbed"])
        for mode in modes:
            if decided[mode]:
                d = statistics.median(decided[mode])
                print(
                    f"median {label[mode]:<12}: eps decided {d:.2f} s after the start"
                    f"{' less the outage' if outages and mode != 'undisturbed' else ''} "
                    f"(x{d / base:.2f})"
                )
    load = os.getloadavg()
    print(f"load average (1, 5, 15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def _shown(value: float | None, spec: str) -> str:
    return "unknown" if value is None else format(value, spec)


if __name__ == "__main__":
    asyncio.run(main())
