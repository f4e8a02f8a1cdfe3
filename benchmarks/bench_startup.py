"""Start-up time and memory per node of ``gossip up``, from the command to t = 0.

Run with ``python benchmarks/bench_startup.py`` (about 2 minutes on two cores). Every case
runs the real command line (``python -m continuized.cli.app up ...``) as a subprocess, and prints:

1. command to t = 0: from just before the command starts to the epoch the coordinator fixed
   (the last registration plus its start delay), read from the run's metrics file;
2. memory: the peak RSS of a node process, the RSS of the fork server (an idle process with
   the same imports: the baseline every node process shares), the memory per node,
   ``(sum of node processes' RSS - processes x baseline) / nodes``, and the private memory
   (USS: pages no other process shares) of a node process divided by its nodes;
3. the run: reached eps or not, activations per second achieved against asked, the mass drift
   and, against the exact simulator's 5-95% band for the same graph and values, the share of
   the measured error points inside it (the fidelity check of ``bench_cluster.py``).

Cases: grid:10x10 one process per node, with the fork server and without it (``--no-fork-
server``: a fresh interpreter per node process, as before; the baseline of the ratio), and
grid:32x32 in host mode (``--nodes-per-process 64``, 1,024 live nodes). Targets: 10x10 at
most 10 s to t = 0; 32x32 at most 20 s to t = 0 and at most 5 MB per node.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from continuized.coordinator.figures.agreement import band_agreement
from continuized.coordinator.figures.state import ErrorPoint
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.values import initial_values

MB = 2**20


@dataclass
class Case:
    """One ``gossip up`` run and what it measured."""

    label: str
    graph: str
    per_process: int
    rate: float
    timeout: float
    fork: bool = True
    to_t0: float = float("nan")
    processes: int = 0
    node_rss_mb: float = 0.0  # peak RSS of one node process
    baseline_mb: float = 0.0  # RSS of the fork server (or a bare node process's imports)
    per_node_mb: float = float("nan")
    uss_per_node_mb: float = float("nan")  # private memory of a node process / its nodes
    reached: bool = False
    stop_reason: str = ""
    activations: int = 0
    achieved: float = 0.0
    drift: float = float("nan")
    inside: float = float("nan")
    offset: float = float("nan")  # median of log10(measured error / simulator's median)
    points: int = 0


def _rss(proc: psutil.Process) -> float:
    try:
        return float(proc.memory_info().rss) / MB
    except psutil.Error:
        return 0.0


async def _sample(proc: asyncio.subprocess.Process, case: Case, since: list[float]) -> None:
    """Every half second: the node processes' RSS (summed) and the fork server's, at peak."""
    parent = psutil.Process(proc.pid)
    peak_total, peak_count = 0.0, 0
    while True:
        with contextlib.suppress(psutil.Error):
            children = parent.children(recursive=True)
            server = [c for c in children if "continuized.cli.forkserver" in " ".join(c.cmdline())]
            if server:
                nodes = [c for c in children if c.ppid() == server[0].pid]
                case.baseline_mb = max(case.baseline_mb, _rss(server[0]))
            else:
                nodes = [c for c in children if " node " in " ".join(c.cmdline())]
            rss = [_rss(n) for n in nodes]
            n = parse_topology(case.graph).n
            if rss and time.time() > since[0]:  # gossiping: sockets, ledgers, windows
                case.processes = max(case.processes, len(rss))
                case.node_rss_mb = max(case.node_rss_mb, max(rss))
                if sum(rss) > peak_total:
                    peak_total, peak_count = sum(rss), len(rss)
                if case.uss_per_node_mb != case.uss_per_node_mb:  # once (smaps is slow)
                    uss = [float(p.memory_full_info().uss) / MB for p in nodes[:8]]
                    case.uss_per_node_mb = max(uss) * len(nodes) / n
            if case.baseline_mb and peak_count:
                # Against the fork server's largest RSS, which grows after the first samples:
                # recomputed at every sample, not frozen at the peak's.
                case.per_node_mb = (peak_total - peak_count * case.baseline_mb) / n
        await asyncio.sleep(0.5)


async def run_case(case: Case, tmp: Path, runs: int) -> Case:
    """Run ``gossip up`` for ``case`` and fill in its figures."""
    metrics, summary = tmp / f"{case.label}.jsonl", tmp / f"{case.label}.json"
    argv = [
        sys.executable,
        "-m",
        "continuized.cli.app",
        "up",
        "--graph",
        case.graph,
        "--rate",
        str(case.rate),
        "--until",
        "1e-6",
        "--timeout",
        str(case.timeout),
        "--nodes-per-process",
        str(case.per_process),
        "--quiet",
        "--log-dir",
        str(tmp / f"{case.label}-logs"),
        "--metrics-file",
        str(metrics),
        "--json",
        str(summary),
        "--fork-server" if case.fork else "--no-fork-server",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    start = time.time()
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env
    )
    since = [float("inf")]
    sampler = asyncio.create_task(_sample(proc, case, since))
    try:
        # Once t = 0 is fixed, sample memory from a second after it (the nodes are gossiping).
        while proc.returncode is None:
            epoch = _epoch(metrics)
            if epoch is not None:
                since[0] = epoch + 1.0
                break
            await asyncio.sleep(0.2)
        _, err = await proc.communicate()
    finally:
        sampler.cancel()
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{case.label}: gossip up exited {proc.returncode}: {err.decode()}")
    epoch = _epoch(metrics)
    case.to_t0 = float("nan") if epoch is None else epoch - start
    result = json.loads(summary.read_text())
    if "rate_achieved" not in result:  # the run failed before its summary: say why
        raise RuntimeError(f"{case.label}: {result.get('failure', result)}")
    case.reached = bool(result["reached"])
    case.stop_reason = str(result["stop_reason"])
    case.activations = int(result["activations"] or 0)
    case.achieved = float(result["rate_achieved"] or 0.0)
    case.drift = float(result["mass_drift_rel"] if result["mass_drift_rel"] is not None else "nan")
    case.inside, case.offset, case.points = _fidelity(case, metrics, runs)
    return case


def _epoch(metrics: Path) -> float | None:
    with contextlib.suppress(OSError, ValueError):
        for line in metrics.read_text().splitlines():
            record = json.loads(line)
            if record.get("kind") == "start":
                return float(record["epoch"])
    return None


def _fidelity(case: Case, metrics: Path, runs: int) -> tuple[float, float, int]:
    """Share of the measured error points inside the simulator's 5-95% band, the median
    log10 ratio of the measured error to the simulator's median, and the number of points."""
    # The exact curve (coordinator.figures.exact_curve) where the nodes sent their traces; the
    # coordinator's estimates otherwise.
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    kind = "exact" if any(r.get("kind") == "exact" for r in records) else "point"
    history = [
        ErrorPoint(r["t"], r["error"], 0.0, r["wall"])
        for r in records
        if r.get("kind") == kind and r.get("t", -1) > 0
    ]
    if len(history) < 3:
        return float("nan"), float("nan"), len(history)
    topo = parse_topology(case.graph)
    q = graph_quantities(topo)
    params = gossip_params("arg", q.mu_gossip, q.r_max)
    t_last = max(p.t for p in history)
    agreement = band_agreement(
        history,
        topo,
        params,
        initial_values("onehot", topo.n),
        runs=runs,
        seed=0,
        t_min=0.02 * t_last,
        floor=1e-6,
    )
    return agreement.inside, agreement.log_ratio_median, len(history)


def _line(case: Case) -> str:
    return (
        f"{case.label:<24} command->t0 {case.to_t0:5.1f} s | {case.processes:3d} processes, "
        f"node process RSS {case.node_rss_mb:5.1f} MB, baseline {case.baseline_mb:5.1f} MB, "
        f"per node {case.per_node_mb:5.2f} MB (private {case.uss_per_node_mb:5.2f} MB) | "
        f"stop {case.stop_reason}, {case.activations} activations, "
        f"{case.achieved:5.0f}/{case.rate:.0f} per s, drift {case.drift:.1e}, "
        f"inside band {case.inside:4.0%} of {case.points} points (median offset "
        f"{case.offset:+.2f} decades)"
    )


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", default="grid:10x10", help="one process per node")
    parser.add_argument("--small-rate", type=float, default=500.0)
    parser.add_argument("--big", default="grid:32x32", help="host mode")
    parser.add_argument("--per-process", type=int, default=64, help="host mode: K")
    parser.add_argument("--big-rate", type=float, default=3000.0)
    parser.add_argument("--big-seconds", type=float, default=40.0, help="--timeout of big")
    parser.add_argument("--runs", type=int, default=50, help="simulator runs for the band")
    parser.add_argument("--no-baseline", action="store_true", help="skip --no-fork-server")
    parser.add_argument("--big-only", action="store_true", help="only the host-mode case")
    args = parser.parse_args(argv)
    cases = [Case("small, fork server", args.small, 1, args.small_rate, 60.0)]
    if args.big_only:
        cases, args.no_baseline = [], True
    if not args.no_baseline:
        cases.append(Case("small, no fork server", args.small, 1, args.small_rate, 60.0, False))
    cases.append(
        Case(f"big, {args.per_process}/process", args.big, args.per_process, args.big_rate,
             args.big_seconds)
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        for case in cases:
            await run_case(case, Path(tmp), args.runs)
            print(_line(case), flush=True)
    small = cases[0]
    if not args.big_only:
        print(f"{args.small}: command->t0 {small.to_t0:.1f} s (target <= 10 s)")
    if not args.no_baseline:
        base = cases[1]
        print(
            f"  without the fork server {base.to_t0:.1f} s: {base.to_t0 / small.to_t0:.1f}x "
            f"slower; node process RSS {base.node_rss_mb:.1f} MB each"
        )
    big = cases[-1]
    print(
        f"{args.big} ({parse_topology(args.big).n} nodes, {big.processes} processes): "
        f"command->t0 {big.to_t0:.1f} s (target <= 20 s), {big.per_node_mb:.2f} MB per node "
        f"(target <= 5), {big.per_node_mb * parse_topology(args.big).n / 1024:.2f} GB in all "
        f"over the baseline; inside the simulator's band {big.inside:.0%} "
        f"(rate {big.achieved:.0f}/{big.rate:.0f})"
    )


if __name__ == "__main__":
    asyncio.run(main())
