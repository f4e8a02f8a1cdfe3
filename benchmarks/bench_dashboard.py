"""Dashboard under load: many nodes reporting often, a real coordinator, a real browser.

What it measures, against a real ``mosquitto`` and a real ``gossip coordinator`` process:

1. baseline: the coordinator ingesting the reports, with no dashboard;
2. the same coordinator with ``--dashboard-port`` and one headless Chromium tab open on it.

For both it reports the coordinator process's CPU (its own process, not the band's child) and
their ratio; for the second, the update latency from a node publishing its report (the report's
``wall``) to the browser painting the frame that shows it (``window.__dash.latency``, taken one
animation frame after the draw), and the browser's time per drawn frame.

The stand-in nodes register over ZeroMQ like real ones (contract C2) and publish contract-C3
reports over MQTT; their values come from the exact process run centrally
(:class:`coordinator.dashboard.synthetic.SyntheticCluster`), kept at a low activation rate so
that the publisher's CPU stays small: the dashboard's load is the number of reports, not the
activation rate.

Run: ``python benchmarks/bench_dashboard.py`` (defaults: grid:15x15, 10 Hz, 20 s per phase).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiomqtt
import psutil
import zmq
import zmq.asyncio

from continuized.coordinator.dashboard.synthetic import SyntheticCluster
from continuized.coordinator.local.broker import find_mosquitto, mosquitto_broker
from continuized.coordinator.machine.children import spawn, stop_process
from continuized.coordinator.machine.ports import free_port
from continuized.gossip.wire.schema import Bootstrap, Register, decode, encode

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


async def _register(ctx: zmq.asyncio.Context, bind: str, name: str, port: int) -> Bootstrap:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(bind)
    try:
        while True:
            await sock.send(encode(Register(name, f"tcp://127.0.0.1:{port}", None, 1)))
            if await sock.poll(1000):
                answer = decode(await sock.recv())
                if not isinstance(answer, Bootstrap):
                    raise SystemExit(f"registration of {name} refused: {answer}")
                return answer
    finally:
        sock.close(0)


async def _publish(
    cluster: SyntheticCluster,
    host: str,
    port: int,
    prefix: str,
    hz: float,
    stop: asyncio.Event,
    sent: list[int],
    ids: list[int],
) -> None:
    """Publish the reports of nodes ``ids`` ``hz`` times a second until ``stop``.

    The count goes to ``sent[0]``.
    """
    period = 1.0 / hz
    async with aiomqtt.Client(host, port, max_queued_outgoing_messages=100_000) as client:
        next_round = time.monotonic()
        while not stop.is_set():
            wall = time.time()
            cluster.advance(max(cluster.t, cluster.rate * (wall - cluster.epoch)))
            for node in ids:
                payload = cluster.report(node, time.time())
                await client.publish(f"{prefix}/node/{node}/state", json.dumps(payload), qos=0)
                sent[0] += 1
            # A late round is not made up by a burst: the load stays hz reports per node.
            next_round = max(next_round + period, time.monotonic())
            await asyncio.sleep(max(0.0, next_round - time.monotonic()))


async def _publisher_main(args: argparse.Namespace) -> None:
    """The stand-in nodes, in a process of their own: register, then publish until killed.

    Prints ``sent <count>`` twice a second so that the driver can count reports per window.
    """
    cluster = SyntheticCluster(args.graph, "arg", rate=args.rate)
    ctx = zmq.asyncio.Context()
    # This shard's share of the nodes; the coordinator gives ids in order of arrival, and each
    # shard reports for the ids it was given (the values come from one shared seeded process).
    mine = range(args.shard, cluster.topology.n, args.shards)
    boots = await asyncio.gather(
        *(_register(ctx, args.bind, f"bench-{k}", 20000 + k) for k in mine)
    )
    ctx.destroy(0)
    ids = sorted(b.node_id for b in boots)
    cluster.epoch, cluster.rate = boots[0].epoch, boots[0].rate
    sent = [0]
    stop = asyncio.Event()

    async def tell() -> None:
        while True:
            print(f"sent {sent[0]}", flush=True)
            await asyncio.sleep(0.5)

    async with asyncio.TaskGroup() as tg:
        tg.create_task(tell(), name="tell")
        prefix = f"gossip/{boots[0].cluster}"
        tg.create_task(
            _publish(cluster, args.broker_host, args.broker_port, prefix, args.hz, stop, sent, ids),
            name="publish",
        )


async def _phase(
    args: argparse.Namespace, broker: Any, dashboard: bool, workdir: Path
) -> dict[str, Any]:
    bind = f"tcp://127.0.0.1:{free_port()}"
    cluster_name = f"bench{free_port()}"
    port = free_port()
    argv = [
        sys.executable, "-m", "continuized.cli.app", "coordinator",
        "--graph", args.graph, "--broker", broker.url, "--bind", bind,
        "--rate", str(args.rate), "--values", "onehot", "--cluster", cluster_name,
        "--metrics-period", str(1.0 / args.hz), "--keep-running", "--no-resume",
        "--start-delay", "0.5", "--metrics-file", str(workdir / f"metrics-{dashboard}.jsonl"),
    ]  # fmt: skip
    if dashboard:
        argv += ["--dashboard-port", str(port)]
    proc = await spawn(argv, log=workdir / f"coordinator-{dashboard}.log")
    # Several publisher processes: one Python process cannot publish 2,250 reports a second
    # on a loaded 2-core machine.
    publishers = []
    for shard in range(args.shards):
        publisher_argv = [
            sys.executable, __file__, "publish", "--bind", bind, "--broker-host", broker.host,
            "--broker-port", str(broker.port), "--graph", args.graph, "--hz", str(args.hz),
            "--rate", str(args.rate), "--shard", str(shard), "--shards", str(args.shards),
        ]  # fmt: skip
        log = workdir / f"publisher-{dashboard}-{shard}.log"
        publishers.append(await spawn(publisher_argv, log=log, stdout_pipe=True))
    counts = [0] * args.shards
    sent = _Total(counts)

    async def count(shard: int, publisher: asyncio.subprocess.Process) -> None:
        assert publisher.stdout is not None
        async for line in publisher.stdout:
            words = line.split()
            if len(words) == 2 and words[0] == b"sent":
                counts[shard] = int(words[1])

    result: dict[str, Any] = {"dashboard": dashboard}
    counters = [
        asyncio.create_task(count(k, p), name=f"count-reports-{k}")
        for k, p in enumerate(publishers)
    ]
    try:
        while min(counts) == 0:  # registered, bootstrapped and publishing
            if any(p.returncode is not None for p in publishers):
                raise SystemExit(f"a publisher exited; see {workdir}/publisher-*.log")
            await asyncio.sleep(0.2)
        coordinator = psutil.Process(proc.pid)
        if dashboard:
            url = f"http://127.0.0.1:{port}/"
            result.update(await _with_browser(args, url, coordinator, sent))
        else:
            await asyncio.sleep(args.warmup)
            result.update(await _measure_cpu(coordinator, args.seconds, sent))
    finally:
        for p in publishers:
            await stop_process(p)
        await stop_process(proc)
        for task in counters:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return result


class _Total:
    """``sent[0]``: the sum of the publishers' counts, read like the one-process counter."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts

    def __getitem__(self, index: int) -> int:
        return sum(self.counts)


async def _measure_cpu(process: psutil.Process, seconds: float, sent: Any) -> dict[str, Any]:
    before, sent_before = process.cpu_times(), sent[0]
    started = time.monotonic()
    await asyncio.sleep(seconds)
    after, sent_after = process.cpu_times(), sent[0]
    took = time.monotonic() - started
    used = (after.user - before.user) + (after.system - before.system)
    return {"cpu_percent": 100.0 * used / took, "reports_per_s": (sent_after - sent_before) / took}


async def _with_browser(
    args: argparse.Namespace, url: str, coordinator: psutil.Process, sent: Any
) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory(prefix="gossip-bench-chromium-") as profile:
        async with async_playwright() as pw:
            context = await pw.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
                viewport={"width": 1400, "height": 1300},
            )  # fmt: skip
            try:
                page = context.pages[0] if context.pages else await context.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                await page.goto(url, timeout=120_000)
                await page.wait_for_function(
                    f"window.__dash && window.__dash.graphNodes() === {args.nodes}",
                    timeout=60_000,
                )
                await asyncio.sleep(args.warmup)
                await page.evaluate(
                    "window.__dash.latency = []; window.__dash.renderMs = [];"
                    " window.__dash.parts = {}"
                )
                batches0 = await page.evaluate("window.__dash.batches")
                cpu = await _measure_cpu(coordinator, args.seconds, sent)
                data = await page.evaluate(
                    "({lat: window.__dash.latency, render: window.__dash.renderMs,"
                    " batches: window.__dash.batches, points: window.__dash.livePoints(),"
                    " parts: window.__dash.parts})"
                )
                if errors:
                    raise SystemExit(f"page errors: {errors}")
            finally:
                await context.close()
    newest = [s["newest"] * 1000 for s in data["lat"]]
    oldest = [s["oldest"] * 1000 for s in data["lat"]]
    served = [s["oldestServed"] * 1000 for s in data["lat"]]
    return {
        **cpu,
        "frames": len(data["render"]),
        "batches_per_s": (data["batches"] - batches0) / args.seconds,
        "latency_newest_ms": _quantiles(newest),
        "latency_oldest_ms": _quantiles(oldest),
        "latency_dashboard_ms": _quantiles(served),
        "render_ms": _quantiles(data["render"]),
        "chart_points": data["points"],
        "parts_ms": data["parts"],
    }


def _quantiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        return {"p50": float("nan"), "p95": float("nan"), "max": float("nan")}
    cuts = statistics.quantiles(values, n=100)
    return {"p50": cuts[49], "p95": cuts[94], "max": max(values)}


async def main(args: argparse.Namespace) -> None:
    binary = find_mosquitto()
    if binary is None:
        raise SystemExit("mosquitto is not installed (bash scripts/system-deps)")
    args.nodes = SyntheticCluster(args.graph, "arg").topology.n
    with tempfile.TemporaryDirectory(prefix="gossip-bench-") as tmp:
        async with mosquitto_broker(binary) as broker:
            base = await _phase(args, broker, False, Path(tmp))
            dash = await _phase(args, broker, True, Path(tmp))
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(
        f"{args.nodes} nodes x {args.hz:g} Hz = {args.nodes * args.hz:.0f} reports/s asked; "
        f"{args.seconds:g} s per phase; {os.cpu_count()} CPUs, load average {load}"
    )
    print(
        f"  published during the windows: baseline {base['reports_per_s']:.0f}/s, "
        f"dashboard {dash['reports_per_s']:.0f}/s"
    )
    per_base = 1000.0 * base["cpu_percent"] / max(base["reports_per_s"], 1e-9)
    per_dash = 1000.0 * dash["cpu_percent"] / max(dash["reports_per_s"], 1e-9)
    print(
        f"  coordinator CPU: baseline (no dashboard) {base['cpu_percent']:.1f}%, "
        f"with dashboard + 1 tab {dash['cpu_percent']:.1f}%; per 1000 reports/s: "
        f"{per_base:.1f}% vs {per_dash:.1f}% (ratio {per_dash / max(per_base, 1e-9):.2f})"
    )
    lat_new, lat_old, render = (
        dash["latency_newest_ms"],
        dash["latency_oldest_ms"],
        dash["render_ms"],
    )
    print(
        f"  update latency publish->paint, newest report in a batch: p50 {lat_new['p50']:.0f} ms, "
        f"p95 {lat_new['p95']:.0f} ms, max {lat_new['max']:.0f} ms"
    )
    print(
        f"  update latency publish->paint, oldest report in a batch: p50 {lat_old['p50']:.0f} ms, "
        f"p95 {lat_old['p95']:.0f} ms, max {lat_old['max']:.0f} ms"
    )
    own = dash["latency_dashboard_ms"]
    print(
        f"  of which the dashboard's part, coordinator arrival->paint (oldest report): "
        f"p50 {own['p50']:.0f} ms, p95 {own['p95']:.0f} ms, max {own['max']:.0f} ms"
    )
    print(
        f"  browser: {dash['batches_per_s']:.1f} batches/s, {dash['frames']} frames drawn, "
        f"draw time p50 {render['p50']:.1f} ms, p95 {render['p95']:.1f} ms"
    )
    parts = ", ".join(f"{k} {v / args.seconds:.0f}" for k, v in dash["parts_ms"].items())
    print(f"  browser drawing time per second of wall time, ms: {parts}")


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="run", choices=("run", "publish"))
    parser.add_argument("--bind", help="publish mode: the coordinator's registration address")
    parser.add_argument("--broker-host", default="127.0.0.1")
    parser.add_argument("--broker-port", type=int, default=1883)
    parser.add_argument("--shards", type=int, default=2, help="publisher processes")
    parser.add_argument("--shard", type=int, default=0, help="publish mode: this one's index")
    parser.add_argument("--graph", default="grid:15x15")
    parser.add_argument("--hz", type=float, default=10.0, help="reports per node per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rate", type=float, default=100.0, help="activations per second")
    return parser.parse_args(argv)


if __name__ == "__main__":
    _parsed = _args()
    asyncio.run(main(_parsed) if _parsed.mode == "run" else _publisher_main(_parsed))
