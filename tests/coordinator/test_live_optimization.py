"""Decentralized optimization on the live cluster: real node processes, a real broker.

Each node loads its own shard of breast-cancer (d = 30), keeps the dual pair (y, z) and
exchanges grad f^*(y); the coordinator measures sum_v |x_v - x*|^2 and the dual sums.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import signal
from pathlib import Path

import numpy as np
import pytest

from continuized.cli.entries import NODE_ENTRIES
from continuized.coordinator.figures.agreement import optimization_agreement
from continuized.coordinator.figures.records import RunSummary
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.local.broker import RunningBroker
from continuized.coordinator.local.launcher import run_up
from continuized.coordinator.local.node_commands import node_argv
from continuized.coordinator.local.settings import UpConfig
from continuized.coordinator.machine.children import spawn, stop_all
from continuized.coordinator.machine.ports import free_ports
from continuized.coordinator.run.service import Coordinator, CoordinatorConfig, prepare

pytest.importorskip(
    "continuized.gossip.problems", reason="needs the optimization core (branch opt)"
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.solo, pytest.mark.timeout(300)]

# logistic:0.1 keeps the condition number L/mu small enough for a test of a few seconds; the
# the guide's logistic:0.01 (docs/optimize.md) runs the same code.
PROBLEM = "logistic:0.1"
DATA = "breast-cancer"
SPLIT = "label:1"


def _config(
    tmp_path: Path, graph: str, until: float, cluster: str, rate: float = 100.0
) -> CoordinatorConfig:
    return CoordinatorConfig(
        graph=graph,
        rate=rate,
        until=until,
        cluster=cluster,
        metrics_period=0.05,
        metrics_file=tmp_path / "run.jsonl",
        json_path=tmp_path / "run.json",
        problem=PROBLEM,
        data=DATA,
        split=SPLIT,
    )


async def _up(
    tmp_path: Path,
    *,
    graph: str = "grid:3x3",
    until: float = 1e-6,
    broker: str | None = None,
    node_args: tuple[str, ...] = (),
    cluster: str = "opt",
    rate: float = 100.0,
) -> tuple[RunSummary, ClusterState]:
    config = UpConfig(
        entries=NODE_ENTRIES,
        coordinator=_config(tmp_path, graph, until, cluster, rate),
        log_dir=tmp_path / "logs",
        broker=broker,
        timeout=150.0,
        node_args=node_args,
    )
    holder: dict[str, ClusterState] = {}

    def started(state: ClusterState, _: RunningBroker) -> None:
        holder["state"] = state

    summary = await run_up(config, started)
    return summary, holder["state"]


def _check_exact_dual_sums(
    summary: RunSummary, state: ClusterState, until: float, final_within: float = 3.0
) -> None:
    """Reached eps on sum_v |x_v - x*|^2, ending within ``final_within`` eps of it; the final
    dual sums are 0 to 1e-9."""
    assert summary.reached, state.message
    assert state.final is not None
    assert state.final.complete
    tracker = state.optimization
    assert tracker is not None
    assert tracker.final is not None
    # sum_v y_v and sum_v z_v start at 0: whatever was lost or repeated, they stay there.
    assert tracker.final.dual_drift <= 1e-9
    assert summary.mass_drift_rel == tracker.final.dual_drift
    assert tracker.final.distance <= final_within * until
    assert summary.final_error == tracker.final.distance
    x_star = np.asarray(tracker.task.x_star)
    np.testing.assert_allclose(
        np.array(state.final.values),
        np.broadcast_to(x_star, (len(state.final.values), x_star.size)),
        atol=1e-2,
    )


@pytest.mark.broker
async def test_logistic_on_a_grid_stays_inside_the_simulators_band_with_real_mosquitto(
    mosquitto: RunningBroker, tmp_path: Path
) -> None:
    summary, state = await _up(tmp_path, broker=mosquitto.url)
    _check_exact_dual_sums(summary, state, 1e-6)
    tracker = state.optimization
    assert tracker is not None
    assert tracker.task.dim == 30
    agreement = optimization_agreement(
        state.history,
        state.topology,  # type: ignore[arg-type]
        tracker.task.problems,
        tracker.task.dual,
        runs=60,
        seed=1,
        t_min=20.0,
        floor=1e-6,
        # The live curve is judged among 1000 of the model's own runs
        # (coordinator.figures.agreement). An accelerated dual curve is volatile: `python
        # benchmarks/bench_agreement.py` judges 400 more runs of the model itself, of which
        # 1.25-1.5% failed at alpha = 0.01 (one CI run did, among 240 runs) and 0.25-0.5% at 0.002,
        # which still fails 27 of 40 runs of a cluster at half the rate. A cluster behind its clocks
        # fails kept_up below.
        null_runs=1000,
        workers=2,
    )
    assert summary.kept_up, summary.as_dict()  # at 100/s, waits are ~1% of a node's gap
    assert len(agreement.t) >= 10
    if not agreement.typical(0.002):
        # Say how the run went, so that a failure in CI shows whether the cluster kept up.
        raise AssertionError(f"{agreement.verdict()}; run: {summary.as_dict()}")
    written = json.loads((tmp_path / "run.json").read_text())
    assert written["algorithm"] == "acd"
    opt = written["optimization"]
    assert (opt["problem"], opt["data"], opt["split"], opt["dim"]) == (PROBLEM, DATA, SPLIT, 30)
    assert opt["dual_drift"] <= 1e-9
    assert opt["gap"] is not None
    assert opt["gap"] >= -1e-9


async def test_dual_sums_stay_exact_under_drops_and_duplicates(tmp_path: Path) -> None:
    # A dropped frame holds both ends' locks for a retry timeout, and an accelerated method
    # whose activations fall behind its mixing diverges: short timeouts and a lower rate.
    summary, state = await _up(
        tmp_path,
        graph="grid:2x3",
        until=1e-5,
        rate=40.0,
        node_args=("--fault", "drop=0.1,dup=0.1", "--retry-timeout", "0.05"),
    )
    _check_exact_dual_sums(summary, state, 1e-5)
    retried = sum(v.counters.get("retried", 0) for v in state.nodes.values())
    duplicates = sum(v.counters.get("duplicates", 0) for v in state.nodes.values())
    assert retried > 0, "drops must have forced retries"
    assert duplicates > 0, "duplicated frames must have been recognised"


async def test_a_killed_node_recovers_its_dual_pair_from_its_neighbours(
    amqtt: RunningBroker, tmp_path: Path
) -> None:
    # The launcher of `gossip up` fails a run whose node crashes; here the nodes are started
    # by hand with fixed ports, so that node 1 can come back at its address under its name.
    # Five distinct ports, the coordinator's first: it binds later, so a port drawn after it
    # could be the same one (a node then fails to bind, and the run never starts).
    coordinator_port, *ports = free_ports(5)
    bind = f"tcp://127.0.0.1:{coordinator_port}"
    config = dataclasses.replace(
        _config(tmp_path, "line:4", 1e-5, "kill"), broker=amqtt.url, bind=bind, run_timeout=150.0
    )
    state, plan = prepare(config)
    coordinator = Coordinator(config, state, plan)
    logs = tmp_path / "logs"
    logs.mkdir()

    def argv(k: int) -> list[str]:
        extra = ["--bind", f"tcp://127.0.0.1:{ports[k]}", "--advertise", "127.0.0.1"]
        return node_argv(NODE_ENTRIES.app, bind, f"node-{k}", "127.0.0.1")[:-2] + extra

    procs: list[asyncio.subprocess.Process] = []
    try:
        async with asyncio.TaskGroup() as tg:
            run = tg.create_task(coordinator.run())
            await coordinator.bound.wait()
            for k in range(4):
                procs.append(await spawn(argv(k), log=logs / f"node-{k}.log"))
            async with asyncio.timeout(60):
                while state.t < 30.0:  # noqa: ASYNC110 (a few hundred activations: t, not s)
                    await asyncio.sleep(0.05)
            procs[1].send_signal(signal.SIGKILL)  # mid-exchange, no goodbye
            await procs[1].wait()
            procs[1] = await spawn(argv(1), log=logs / "node-1-again.log")
            summary = await run
    finally:
        with contextlib.suppress(Exception):
            await stop_all(procs)
    assert summary is not None
    # The restarted node's iterates rejoin the others' and ARG's error is not monotone: in CI
    # it once fell to 4e-6 for the three exact points that stopped the run, then rose to
    # 4.4e-5 by the final reports, 15 units of t later (the other runs end within 3 eps).
    _check_exact_dual_sums(summary, state, 1e-5, final_within=10.0)
    again = (logs / "node-1-again.log").read_text()
    assert "recovered the ledger" in again
