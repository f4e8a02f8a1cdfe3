"""Soak of the control plane: a long ``--keep-running`` run with one process restart a minute,
and every process's memory, open files and CPU per exchange over time.

Run with ``python benchmarks/bench_soak.py --minutes 30`` (the issue's length; ``--minutes 4``
checks the benchmark itself). The deployment is the chaos test's (``tests/coordinator/_chaos.py``):
``gossip keys init``, mosquitto with the keys' passwords and ACL, ``gossip coordinator
--keep-running`` and one ``gossip node`` per node of ``--graph`` (grid:5x5), each process under
a restart policy. The rate is half of lambda* (``--lambda-star``, or measured first: the highest
of ``--probe-rates`` at which ``gossip up --graph G --until 1e-6`` reached eps and kept up,
achieved >= 95% of the rate with its ticks' median wait under a node's mean gap; the agreement
check of ``bench_cluster.py`` is left out). Every minute one process is killed with SIGKILL and
restarted by its policy: the coordinator at minute 1, the broker at minute 2, then the nodes in
turn. The coordinator and the broker are killed early and once, so that their last incarnations
run long enough to be judged (a process killed every few minutes hides any slow growth) and
still live through the restarts of the others: the coordinator through the broker's and every
node's, the broker through every node's reconnection.

Every ``--sample`` seconds each process's RSS, open file descriptors and CPU time are read
(psutil), and each node's exchange count (``initiated + served`` in its MQTT reports, read by a
watcher with the coordinator's MQTT credentials). CPU per exchange is a node's CPU over its own
exchanges; the coordinator's and the broker's over the network's (every node's ``initiated``).
Written: ``soak.csv`` (one row per process and sample) and ``soak.png`` (the three figures over
time), in ``--out``. Printed: per process, RSS and fds at the end of the warm-up (``--warmup``
minutes, default a quarter of the run up to 5) and at the end, their growth, and the median CPU
per exchange; a process restarted after the warm-up is judged on its last incarnation, once it
has run a minute. The issue's target: growth within +-10% for every process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "coordinator"))

from _chaos import Deployment, Supervised, deploy, running, wait_for_line
from machine import background_cores

from continuized.gossip.files.keys import load_mqtt_secret
from continuized.gossip.wire.access import COORDINATOR, mqtt_password

_FIRST_KILLS = ("coordinator", "broker")  # then the nodes in turn
_SETTLE = 60.0  # seconds a restarted incarnation runs before its figures are judged


@dataclass
class Sample:
    """One process at one time."""

    t: float
    name: str
    pid: int
    rss_mb: float
    fds: int
    cpu_s: float
    exchanges: int  # the node's own (initiated + served); the network's for the others
    cpu_us_per_exchange: float | None = None


@dataclass
class Exchanges:
    """The latest counters of each node's reports, by name."""

    latest: dict[str, dict[str, int]] = field(default_factory=dict)

    def own(self, name: str) -> int:
        """A node's exchanges, both ends counted: initiated + served."""
        c = self.latest.get(name, {})
        return int(c.get("initiated", 0)) + int(c.get("served", 0))

    def network(self) -> int:
        """The network's exchanges, each counted once (by its initiator)."""
        return sum(int(c.get("initiated", 0)) for c in self.latest.values())


async def _probe(graph: str, rate: float, tmp: Path) -> bool:
    """Whether ``gossip up`` on ``graph`` at ``rate`` reaches 1e-6 and keeps up."""
    out = tmp / f"probe-{rate:g}.json"
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "continuized.cli.app", "up", "--quiet", "--graph", graph),
        *("--rate", f"{rate:g}", "--until", "1e-6", "--timeout", "120", "--json", str(out)),
        *("--log-dir", str(tmp / f"probe-{rate:g}")),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    await proc.wait()
    if not out.exists():
        return False
    summary: dict[str, Any] = json.loads(out.read_text())
    achieved = float(summary.get("rate_achieved") or 0.0)
    ok = bool(summary.get("reached")) and summary.get("kept_up") is True and achieved >= 0.95 * rate
    print(f"  probe {rate:g}/s: achieved {achieved:.0f}/s, kept_up {summary.get('kept_up')}: "
          f"{'pass' if ok else 'fail'}")  # fmt: skip
    return ok


async def measure_lambda_star(graph: str, rates: list[float]) -> float:
    """The highest of ``rates`` (ascending) that passes :func:`_probe`; stops at the first fail."""
    best = 0.0
    with tempfile.TemporaryDirectory(prefix="soak-probe-") as tmp:
        for rate in sorted(rates):
            if not await _probe(graph, rate, Path(tmp)):
                break
            best = rate
    if best == 0.0:
        raise SystemExit(f"no probe rate passed on {graph}: give --lambda-star or lower rates")
    return best


async def watch(dep: Deployment, counts: Exchanges, stop: asyncio.Event) -> None:
    """Keep the latest counters of every node's reports, through broker restarts."""
    secret = load_mqtt_secret(dep.workdir / "keys" / COORDINATOR / "mqtt.secret")
    while not stop.is_set():
        try:
            async with aiomqtt.Client(
                "127.0.0.1",
                dep.broker_port,
                username=COORDINATOR,
                password=mqtt_password(secret, COORDINATOR),
                identifier="soak-watcher",
            ) as client:
                await client.subscribe("gossip/chaos/node/+/state")
                async for message in client.messages:
                    with contextlib.suppress(ValueError, TypeError):
                        report = json.loads(bytes(message.payload))
                        counters = report.get("counters")
                        if isinstance(counters, dict):
                            counts.latest[str(report.get("name"))] = counters
        except aiomqtt.MqttError:
            await asyncio.sleep(1.0)  # the broker is being restarted: come back


def _read(s: Supervised, t: float, exchanges: int) -> Sample | None:
    if not s.running or s.proc is None:
        return None
    try:
        p = psutil.Process(s.proc.pid)
        with p.oneshot():
            cpu = p.cpu_times()
            return Sample(
                t,
                s.name,
                p.pid,
                p.memory_info().rss / 2**20,
                p.num_fds(),
                cpu.user + cpu.system,
                exchanges,
            )
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _per_exchange(sample: Sample, before: Sample | None) -> None:
    """CPU per exchange since ``before``, of the same incarnation, if it did exchanges."""
    if before is None or before.pid != sample.pid:
        return
    done = sample.exchanges - before.exchanges
    if done > 0:
        sample.cpu_us_per_exchange = 1e6 * (sample.cpu_s - before.cpu_s) / done


async def soak(dep: Deployment, args: argparse.Namespace) -> list[Sample]:
    """Run the deployment for ``args.minutes``, restarting one process a minute; the samples."""
    samples: list[Sample] = []
    counts = Exchanges()
    stop = asyncio.Event()
    previous: dict[str, Sample] = {}
    nodes = [s.name for s in dep.nodes]
    async with running(dep), asyncio.TaskGroup() as tg:
        watcher = tg.create_task(watch(dep, counts, stop), name="soak-watcher")
        if not await wait_for_line(dep.metrics, "start", dep.coordinator, 300.0):
            raise SystemExit(f"the coordinator ended before the start: {dep.coordinator.log}")
        t0 = time.monotonic()
        end = t0 + 60.0 * args.minutes
        next_sample, next_kill, kills, node_kills = t0, t0 + 60.0, 0, 0
        while (now := time.monotonic()) < end:
            if now >= next_kill:
                if kills < len(_FIRST_KILLS):
                    name = _FIRST_KILLS[kills]
                else:
                    name = nodes[node_kills % len(nodes)]
                    node_kills += 1
                dep.everyone[name].kill()
                print(f"  {now - t0:6.0f} s: SIGKILL {name}", flush=True)
                kills += 1
                next_kill += 60.0
            if now >= next_sample:
                network = counts.network()
                for s in dep.everyone.values():
                    own = counts.own(s.name) if s.name.startswith("node-") else network
                    sample = _read(s, now - t0, own)
                    if sample is None:
                        continue
                    _per_exchange(sample, previous.get(s.name))
                    previous[s.name] = sample
                    samples.append(sample)
                next_sample += args.sample
            await asyncio.sleep(max(0.05, min(next_sample, next_kill) - time.monotonic()))
        stop.set()
        watcher.cancel()
    return samples


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def table(samples: list[Sample], warmup_s: float) -> list[dict[str, Any]]:
    """Per process: RSS and fds after the warm-up and at the end, growth, CPU per exchange."""
    rows = []
    names = sorted({s.name for s in samples}, key=lambda n: (n.startswith("node-"), len(n), n))
    for name in names:
        mine = [s for s in samples if s.name == name]
        last_pid = mine[-1].pid
        incarnation = [s for s in mine if s.pid == last_pid]
        born = incarnation[0].t
        # After the warm-up, and a minute into a restarted incarnation.
        settled = [
            s for s in incarnation if s.t >= max(warmup_s, born + _SETTLE if born > 0 else 0)
        ]
        row: dict[str, Any] = {"process": name, "restarted": len({s.pid for s in mine}) - 1}
        if len(settled) < 6:
            row.update(rss_start=None, rss_end=None, rss_growth=None, fds_start=None, fds_end=None)
        else:
            head, tail = settled[:3], settled[-3:]
            rss0 = statistics.median(s.rss_mb for s in head)
            rss1 = statistics.median(s.rss_mb for s in tail)
            row.update(
                since_s=settled[0].t,
                rss_start=rss0,
                rss_end=rss1,
                rss_growth=(rss1 - rss0) / rss0,
                fds_start=int(statistics.median(s.fds for s in head)),
                fds_end=int(statistics.median(s.fds for s in tail)),
            )
        per = [s.cpu_us_per_exchange for s in mine if s.cpu_us_per_exchange is not None]
        per_late = [
            s.cpu_us_per_exchange
            for s in mine
            if s.cpu_us_per_exchange is not None and s.t >= warmup_s
        ]
        row.update(cpu_us_early=_median(per[:6]), cpu_us_late=_median(per_late[-6:]))
        rows.append(row)
    return rows


def _fmt(value: float | None, spec: str) -> str:
    return "unknown" if value is None else format(value, spec)


def print_table(rows: list[dict[str, Any]], warmup_s: float) -> None:
    """The per-process table; ``unknown`` where a figure was not measured."""
    print(
        f"\n{'process':<12} {'restarts':>8} {'since_s':>7} {'RSS MB':>15} {'growth':>8} "
        f"{'fds':>9} {'us/exchange early->late':>24}"
    )
    for r in rows:
        rss = "unknown" if r["rss_start"] is None else f"{r['rss_start']:.1f}->{r['rss_end']:.1f}"
        fds = "unknown" if r["fds_start"] is None else f"{r['fds_start']}->{r['fds_end']}"
        cpu = f"{_fmt(r['cpu_us_early'], '.0f')}->{_fmt(r['cpu_us_late'], '.0f')}"
        growth = "unknown" if r["rss_growth"] is None else f"{100 * r['rss_growth']:+.1f}%"
        print(
            f"{r['process']:<12} {r['restarted']:>8} {_fmt(r.get('since_s'), '.0f'):>7} "
            f"{rss:>15} {growth:>8} "
            f"{fds:>9} {cpu:>24}"
        )
    judged = [r for r in rows if r["rss_growth"] is not None]
    flat = [
        r for r in judged if abs(r["rss_growth"]) <= 0.10 and r["fds_end"] <= r["fds_start"] * 1.1
    ]
    print(
        f"\nafter {warmup_s / 60:g} min of warm-up: {len(flat)}/{len(judged)} judged processes "
        f"flat within +-10% (RSS and fds); {len(rows) - len(judged)} not judged (restarted "
        f"less than {_SETTLE:.0f} s before the end)"
    )


def write_csv(samples: list[Sample], path: Path) -> None:
    """One row per process and sample."""
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(
            ["t_s", "process", "pid", "rss_mb", "fds", "cpu_s", "exchanges", "cpu_us_per_exchange"]
        )
        for s in samples:
            per = "" if s.cpu_us_per_exchange is None else f"{s.cpu_us_per_exchange:.1f}"
            out.writerow(
                [f"{s.t:.1f}", s.name, s.pid, f"{s.rss_mb:.2f}", s.fds, f"{s.cpu_s:.3f}",
                 s.exchanges, per]
            )  # fmt: skip


def plot(samples: list[Sample], path: Path, title: str) -> None:
    """RSS, fds and CPU per exchange over time: nodes in grey, coordinator and broker in color."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    what = (
        ("rss_mb", "RSS (MB)"),
        ("fds", "open fds"),
        ("cpu_us_per_exchange", "CPU us / exchange"),
    )
    colors = {"coordinator": "tab:blue", "broker": "tab:orange"}
    for name in sorted({s.name for s in samples}):
        mine = [s for s in samples if s.name == name]
        for ax, (attr, label) in zip(axes, what, strict=True):
            points = [(s.t / 60, getattr(s, attr)) for s in mine if getattr(s, attr) is not None]
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            ax.plot(
                xs, ys, color=colors.get(name, "0.6"), lw=1.5 if name in colors else 0.6,
                label=name if name in colors else None,
            )  # fmt: skip
            ax.set_ylabel(label)
    axes[2].set_yscale("log")
    axes[2].set_xlabel("minutes since the start (one process killed and restarted a minute)")
    axes[0].legend(loc="upper left")
    axes[0].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


async def _main(args: argparse.Namespace) -> int:
    out = Path(args.out or tempfile.mkdtemp(prefix="soak-"))
    if (out / "run").exists():
        # An earlier soak's keys and logs: keep them rather than overwrite half of them.
        raise SystemExit(f"error: {out / 'run'} holds an earlier soak; pass a new --out")
    print(f"load: {await background_cores():.2f} cores busy before the soak")
    if args.lambda_star is None:
        print(f"measuring lambda* on {args.graph}:")
        args.lambda_star = await measure_lambda_star(
            args.graph, [float(r) for r in args.probe_rates.split(",")]
        )
    rate = args.lambda_star / 2
    warmup = 60.0 * (args.warmup if args.warmup is not None else min(5.0, args.minutes / 4))
    print(
        f"soak: {args.graph} at {rate:g}/s (half of lambda* {args.lambda_star:g}), "
        f"{args.minutes:g} min, warm-up {warmup / 60:g} min, files in {out}"
    )
    dep = await deploy(
        out / "run", args.graph, rate, 1e-9, seed=args.seed, coordinator=("--keep-running",)
    )
    started = time.monotonic()
    samples = await soak(dep, args)
    write_csv(samples, out / "soak.csv")
    rows = table(samples, warmup)
    print_table(rows, warmup)
    plot(samples, out / "soak.png", f"soak: {args.graph} at {rate:g}/s, {args.minutes:g} min")
    print(
        f"wrote {out / 'soak.csv'} and {out / 'soak.png'} ({time.monotonic() - started:.0f} s; "
        f"load after: {await background_cores():.2f} cores)"
    )
    return 0


def main() -> int:
    """Parse the options and soak."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--graph", default="grid:5x5")
    parser.add_argument("--lambda-star", type=float, default=None, help="skip its measurement")
    parser.add_argument("--probe-rates", default="200,400,600,800,1000")
    parser.add_argument(
        "--warmup", type=float, default=None, help="minutes (default: min(5, minutes/4))"
    )
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="", help="directory for the CSV, the PNG and the logs")
    return asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
