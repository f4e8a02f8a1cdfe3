"""CPU seconds per exchange of the live nodes against raw pyzmq ping-pong, in the same run.

Run with ``python benchmarks/bench_node_cpu.py`` (about a minute). It prints:

1. raw: CPU seconds per round trip of a pyzmq DEALER (asyncio client, one frame in flight,
   as a node's own exchange) against a blocking pyzmq ROUTER echo in another process, over
   loopback TCP, with a frame the size of an exchange request. Both processes are counted,
   every thread included (zmq's I/O threads do part of the work). A secure cluster is
   measured against round trips over CurveZMQ, a plain one against plain round trips.
2. cluster: a whole ``gossip up`` on ``--graph`` (default line:30) at a high asked rate: the
   achieved rate, and over the steady part of the run (from ``--warmup`` seconds after the
   epoch to the last report that counted new exchanges), the CPU seconds per exchange of the
   nodes (all node processes together, every thread), of the coordinator (this process) and
   of the broker; the share of the nodes' CPU spent in threads other than the event loop's
   (zmq's I/O threads), how often the nodes' event loops went to sleep per exchange, and the
   cores that every other process of the machine kept busy meanwhile (other jobs'
   load: :mod:`machine`).
3. the ratio node CPU per exchange / raw CPU per round trip of the same security. An
   exchange is one round trip (a request and its reply between two processes), so the ratio
   is the node's overhead over the bare messaging.

CPU time depends less than throughput on what else the machine runs, but it does depend on
it: 30 node processes on two cores run with cold caches, and every wake-up of a process
costs tens of microseconds before any Python runs. Compare figures of one run, or of runs
made back to back. ``--algorithm rg`` (the default) never stops early on divergence, so the
run lasts ``--duration``; the cost of an exchange is the same for ARG. The metrics period
(``--period``) sets a fixed cost per second (reports by every node, their ingestion by the
coordinator), spread over the exchanges of that second.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
from machine import busy_cpu_seconds
from raw_zmq import REQUEST_FRAME, echo_dealer

from continuized.cli.entries import NODE_ENTRIES
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.local.broker import RunningBroker
from continuized.coordinator.local.launcher import run_up
from continuized.coordinator.local.node_commands import default_metrics_period
from continuized.coordinator.local.settings import UpConfig
from continuized.coordinator.run.service import CoordinatorConfig
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.wire.access import host_sizes


def _cpu(proc: psutil.Process) -> float:
    """User + system CPU seconds of ``proc`` (every thread); 0 if it is gone."""
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


@dataclass
class RawCpu:
    """CPU cost of raw pyzmq round trips."""

    round_trips: int
    cpu_per_rt_us: float
    per_s: float


async def raw_cpu(round_trips: int = 20_000, *, secure: bool = False) -> RawCpu:
    """Measure CPU per round trip of an asyncio DEALER against a ROUTER echo process
    (``secure``: over CurveZMQ)."""
    me = psutil.Process()
    async with echo_dealer(warmup=500, secure=secure) as (sock, echo_pid):
        echo_proc = psutil.Process(echo_pid)
        cpu0 = _cpu(me) + _cpu(echo_proc)
        start = time.perf_counter()
        for _ in range(round_trips):
            await sock.send(REQUEST_FRAME)
            await sock.recv()
        wall = time.perf_counter() - start
        cpu = _cpu(me) + _cpu(echo_proc) - cpu0
    return RawCpu(round_trips, cpu / round_trips * 1e6, round_trips / wall)


@dataclass
class Sample:
    """Cumulative figures at one moment of a cluster run; ``nodes``: pid -> (cpu, zmq threads);
    ``busy``: the whole machine's busy CPU seconds."""

    wall: float
    activations: int
    nodes: dict[int, tuple[float, float, int]]
    coordinator: float
    broker: float
    busy: float


@dataclass
class ClusterCpu:
    """CPU cost of a cluster's exchanges over the steady part of a run."""

    asked: float
    achieved: float
    exchanges: int
    seconds: float
    node_us: float
    node_cores: float
    io_share: float
    sleeps: float
    coordinator_us: float
    broker_us: float
    others_cores: float
    rtt_p50_ms: float | None
    rtt_p99_ms: float | None
    state: ClusterState | None = None


def _node_cpu(procs: list[psutil.Process]) -> dict[int, tuple[float, float, int]]:
    """CPU of each node process, the part spent in threads other than the main one, and the
    main thread's voluntary context switches (how often it went to sleep: each wake-up costs
    tens of microseconds of CPU on a busy machine, more than most of the Python work).

    A node's only threads besides its event loop are zmq's (I/O thread and reaper).
    """
    out = {}
    for proc in procs:
        try:
            times = proc.cpu_times()  # counts threads that have exited too
            main = next(t for t in proc.threads() if t.id == proc.pid)
            switches = proc.num_ctx_switches().voluntary  # the main thread's, on Linux
        except (psutil.Error, StopIteration):
            continue
        total = times.user + times.system
        out[proc.pid] = (total, total - main.user_time - main.system_time, switches)
    return out


def _node_delta(first: Sample, last: Sample) -> tuple[float, float, int]:
    """CPU, zmq-thread CPU and main-thread sleeps of the nodes between two samples."""
    common = first.nodes.keys() & last.nodes.keys()
    total = sum(last.nodes[p][0] - first.nodes[p][0] for p in common)
    io = sum(last.nodes[p][1] - first.nodes[p][1] for p in common)
    sleeps = sum(last.nodes[p][2] - first.nodes[p][2] for p in common)
    return total, io, sleeps


async def _sample(
    state_box: dict[str, ClusterState], started: asyncio.Event, samples: list[Sample]
) -> None:
    me = psutil.Process()
    await started.wait()
    state = state_box["state"]
    while True:
        children = me.children(recursive=True)
        nodes = [p for p in children if _is_node(p)]
        brokers = [p for p in children if _is_broker(p)]
        samples.append(
            Sample(
                time.time(),
                state.activations(),
                _node_cpu(nodes),
                _cpu(me),
                sum(_cpu(p) for p in brokers),
                busy_cpu_seconds(),
            )
        )
        await asyncio.sleep(0.5)


def _is_node(proc: psutil.Process) -> bool:
    """A node process: ``gossip node`` started as such, or forked by the fork server."""
    with contextlib.suppress(psutil.Error):
        parent = proc.parent()
        forked = parent is not None and NODE_ENTRIES.fork_server in parent.cmdline()
        return forked or "node" in proc.cmdline()
    return False


def _is_broker(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return "mosquitto" in proc.name()
    return False


async def cluster_cpu(
    graph: str,
    algorithm: str,
    rate: float,
    duration: float,
    warmup: float,
    period: float,
    node_args: tuple[str, ...] = (),
    per_process: int = 1,
    until: float = 1e-300,
    optimize: tuple[str, str, str] | None = None,
    secure: bool = True,
) -> ClusterCpu:
    """Run a cluster for ``duration`` seconds of t and measure its CPU per exchange
    (``secure``: CurveZMQ and MQTT passwords, as ``gossip up`` runs by default).

    ``optimize`` is ``(problem, data, split)`` for an optimization run; ``until`` its target
    (the default is never reached: the run lasts its whole timeout).
    """
    box: dict[str, ClusterState] = {}
    ready = asyncio.Event()
    samples: list[Sample] = []

    def started(state: ClusterState, _: RunningBroker) -> None:
        box["state"] = state
        ready.set()

    with tempfile.TemporaryDirectory(prefix="bench-node-cpu-") as tmp:
        config = UpConfig(
            entries=NODE_ENTRIES,
            coordinator=CoordinatorConfig(
                graph=graph,
                algorithm=algorithm,
                rate=rate,
                until=until,
                values=None if optimize else "onehot",
                metrics_period=period,
                problem=optimize[0] if optimize else "",
                data=optimize[1] if optimize else "",
                split=optimize[2] if optimize else "",
            ),
            log_dir=Path(tmp),
            timeout=duration,
            node_args=node_args,
            nodes_per_process=per_process,
            secure=secure,
        )
        async with asyncio.TaskGroup() as tg:
            sampler = tg.create_task(_sample(box, ready, samples), name="cpu-sampler")
            try:
                summary = await run_up(config, started)
            finally:
                sampler.cancel()
    state = box["state"]
    epoch = state.epoch or samples[0].wall
    # The steady part: after the warm-up (the nodes start up and import before the epoch, and
    # that CPU is not the exchanges'), and before the stop (the activations stop growing).
    processes = len(host_sizes(state.expected, per_process))
    window = [s for s in samples if s.wall >= epoch + warmup and len(s.nodes) == processes]
    growing = [
        i for i in range(1, len(window)) if window[i].activations > window[i - 1].activations
    ]
    steady = window[: growing[-1] + 1] if growing else []
    if len(steady) < 2:
        raise SystemExit("the run was too short to measure: raise --duration")
    first, last = steady[0], steady[-1]
    exchanges = max(last.activations - first.activations, 1)
    node_cpu, io_cpu, sleeps = _node_delta(first, last)
    seconds = last.wall - first.wall
    ours = node_cpu + last.coordinator - first.coordinator + last.broker - first.broker
    return ClusterCpu(
        asked=rate,
        achieved=summary.rate_achieved or 0.0,
        exchanges=exchanges,
        seconds=seconds,
        node_us=node_cpu / exchanges * 1e6,
        node_cores=node_cpu / seconds,
        io_share=io_cpu / node_cpu if node_cpu > 0 else 0.0,
        sleeps=sleeps / exchanges,
        coordinator_us=(last.coordinator - first.coordinator) / exchanges * 1e6,
        broker_us=(last.broker - first.broker) / exchanges * 1e6,
        others_cores=max(0.0, last.busy - first.busy - ours) / seconds,
        rtt_p50_ms=summary.rtt_p50_ms,
        rtt_p99_ms=summary.rtt_p99_ms,
        state=state,
    )


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", default="line:30")
    parser.add_argument("--algorithm", default="rg", choices=("arg", "rg"))
    parser.add_argument("--rate", type=float, default=8000.0, help="asked activations/s")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of gossip")
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds not measured")
    parser.add_argument(
        "--period", type=float, default=None, help="metrics period (s; default: gossip up's)"
    )
    parser.add_argument("--round-trips", type=int, default=20_000)
    parser.add_argument("--node-arg", action="append", default=[])
    parser.add_argument(
        "--nodes-per-process", type=int, default=1, help="host mode: nodes per node process"
    )
    parser.add_argument(
        "--security",
        choices=("secure", "insecure", "both"),
        default="secure",
        help="both: a secured then a plain cluster, and their CPU-per-exchange ratio",
    )
    args = parser.parse_args(argv)
    if args.period is None:
        args.period = default_metrics_period(parse_topology(args.graph).n, args.nodes_per_process)

    kinds = {"secure": [True], "insecure": [False], "both": [True, False]}[args.security]
    raws = {secure: await raw_cpu(args.round_trips, secure=secure) for secure in kinds}
    for secure, raw in raws.items():
        print(
            f"raw pyzmq DEALER (asyncio) / ROUTER echo{' over CurveZMQ' if secure else ''}, "
            "one in flight, both processes"
        )
        print(
            f"  {raw.cpu_per_rt_us:.1f} us CPU per round trip "
            f"({raw.round_trips} round trips, {raw.per_s:,.0f}/s)"
        )
    per_exchange = {}
    for secure in kinds:
        run = await cluster_cpu(
            args.graph,
            args.algorithm,
            args.rate,
            args.duration,
            args.warmup,
            args.period,
            tuple(args.node_arg),
            args.nodes_per_process,
            secure=secure,
        )
        per_exchange[secure] = run.node_us
        print(f"\n{'secure (CurveZMQ)' if secure else 'INSECURE (plain sockets)'}:")
        report(run, raws[secure], args)
    if len(per_exchange) == 2:
        print(
            f"\nnode CPU per exchange secure / insecure = "
            f"{per_exchange[True] / per_exchange[False]:.2f}x (target <= 1.3x)"
        )


def report(run: ClusterCpu, raw: RawCpu, args: argparse.Namespace) -> None:
    """Print one cluster run's figures."""
    print(
        f"\n{args.algorithm} on {args.graph}, asked {run.asked:.0f}/s, metrics every "
        f"{args.period:g} s, {args.nodes_per_process} node(s) per process"
    )
    print(f"  achieved {run.achieved:,.0f}/s ({run.achieved / run.asked:.0%} of asked)")
    print(
        f"  steady window {run.seconds:.1f} s, {run.exchanges} exchanges: CPU per exchange "
        f"nodes {run.node_us:.0f} us ({run.io_share:.0%} in zmq I/O threads), "
        f"coordinator {run.coordinator_us:.0f} us, broker {run.broker_us:.0f} us; the nodes "
        f"used {run.node_cores:.2f} cores; {run.sleeps:.1f} event-loop sleeps per exchange; "
        f"every other process on the machine {run.others_cores:.2f} cores"
    )
    if run.rtt_p50_ms is not None and run.rtt_p99_ms is not None:
        print(f"  exchange round trip p50 {run.rtt_p50_ms:.2f} ms, p99 {run.rtt_p99_ms:.2f} ms")
    print(
        f"  node CPU per exchange / raw CPU per round trip (same security) = "
        f"{run.node_us / raw.cpu_per_rt_us:.1f}x"
    )


if __name__ == "__main__":
    asyncio.run(main())
