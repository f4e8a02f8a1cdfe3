"""The coordinator against stand-in nodes: bootstrap, measure, stop, resume, refuse.

Real sockets and a real broker; the nodes are ``coordinator_fake_nodes.py`` (the real
node processes are exercised in ``test_cluster.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiomqtt
import pytest
import zmq
import zmq.asyncio
from coordinator_fake_nodes import FakeCluster, register

from continuized.coordinator.figures.records import ErrorPoint, RunSummary
from continuized.coordinator.local.broker import RunningBroker
from continuized.coordinator.machine.ports import free_port
from continuized.coordinator.run.evaluation import run_diverged
from continuized.coordinator.run.service import Coordinator, CoordinatorConfig
from continuized.gossip.errors import ConfigError, TransportError
from continuized.gossip.wire.schema import (
    Bootstrap,
    Register,
    RegisterError,
    Request,
    decode,
    encode,
)

pytestmark = pytest.mark.timeout(90)


def _config(broker: RunningBroker | None, tmp_path: Path, **over: object) -> CoordinatorConfig:
    base: dict[str, object] = {
        "graph": "line:4",
        "broker": broker.url if broker is not None else "",
        "bind": f"tcp://127.0.0.1:{free_port()}",
        "rate": 300.0,
        "values": "onehot",
        "until": 1e-4,
        "cluster": f"t{free_port()}",
        "metrics_file": tmp_path / "run.jsonl",
        "json_path": tmp_path / "run.json",
        "metrics_period": 0.05,
        "start_delay": 0.3,
        "register_timeout": 20.0,
        "stop_timeout": 10.0,
        "run_timeout": 60.0,
    }
    base.update(over)
    return CoordinatorConfig(**base)  # type: ignore[arg-type]


async def _register_all(
    ctx: zmq.asyncio.Context, config: CoordinatorConfig, n: int
) -> list[Bootstrap]:
    answers = await asyncio.gather(
        *(register(ctx, config.bind, f"n{k}", 7000 + k, None) for k in range(n))
    )
    boots = [a for a in answers if isinstance(a, Bootstrap)]
    assert len(boots) == n, answers
    return sorted(boots, key=lambda b: b.node_id)


async def _run_with_fakes(
    config: CoordinatorConfig, broker: RunningBroker, n: int, **fake: Any
) -> tuple[Coordinator, FakeCluster, RunSummary | None]:
    """Run a coordinator with ``n`` fake nodes (``FakeCluster(boots, **fake)``) to its end."""
    coord = Coordinator(config)
    ctx = zmq.asyncio.Context()
    try:
        async with asyncio.TaskGroup() as tg:
            run = tg.create_task(coord.run())
            await coord.bound.wait()
            cluster = FakeCluster(await _register_all(ctx, config, n), **fake)
            tg.create_task(cluster.run(broker.host, broker.port))
            summary = await run
    finally:
        ctx.destroy(0)
    return coord, cluster, summary


async def _retained_status(broker: RunningBroker, cluster: str) -> dict[str, object]:
    async with aiomqtt.Client(broker.host, broker.port) as client:
        await client.subscribe(f"gossip/{cluster}/coordinator/status", qos=1)
        async with asyncio.timeout(5):
            async for message in client.messages:
                assert isinstance(message.payload, bytes)
                status: dict[str, object] = json.loads(message.payload)
                return status
    raise AssertionError("no status")


async def test_bootstrap_measure_stop_and_exact_final(
    any_broker: RunningBroker, tmp_path: Path
) -> None:
    broker = any_broker
    config = _config(broker, tmp_path, graph="line:6", rate=100.0, until=1e-6)
    coord, fake, summary = await _run_with_fakes(config, broker, 6, seed=1)
    assert [b.initial_value for b in fake.boots] == [(1.0,)] + [(0.0,)] * 5
    assert fake.boots[0].broker == broker.url
    assert summary is not None
    assert summary.reached
    assert fake.stop_seen.is_set()
    assert summary.final_error is not None
    # The nodes gossip on between the decision and the stop, and ARG's error is not monotone:
    # the exact final error is eps up to a small factor. The mass is what must be exact.
    assert summary.final_error <= 10 * config.until
    assert summary.mass_drift_rel is not None
    assert summary.mass_drift_rel <= 1e-9
    assert summary.activations == int(fake.counts.sum()) // 2
    state = coord.state
    assert state.phase == "done"
    assert state.final is not None
    assert state.final.complete
    # The history is in t order and starts high.
    ts = [p.t for p in state.history]
    assert ts == sorted(ts)
    assert state.history[0].error > 100 * config.until
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert kinds[0] == "start"
    assert {"point", "reached", "stop", "final"} <= set(kinds)
    written = json.loads((tmp_path / "run.json").read_text())
    for key in (
        "reached",
        "t_eps",
        "wall_s",
        "activations",
        "rate_achieved",
        "final_error",
        "mass_drift_rel",
        "rtt_p50_ms",
        "rtt_p99_ms",
    ):
        assert key in written
    status = await _retained_status(broker, config.cluster)
    assert status["phase"] == "done"
    assert status["run_id"] == summary.run_id
    # These nodes send no trace: the estimates decided, and t_eps is unknown, not theirs.
    assert summary.t_eps is None
    assert summary.wall_s is None
    assert summary.t_eps_estimate is not None
    assert summary.exact_points == 0
    assert summary.exact_note.startswith("not collected")
    assert written["t_eps"] is None
    assert written["t_eps_estimate"] == summary.t_eps_estimate


async def test_without_a_point_while_running_the_rate_comes_from_the_final_reports(
    any_broker: RunningBroker, tmp_path: Path
) -> None:
    """A large run's reports come seconds apart, and none may complete a point before the
    stop: the achieved rate is then the final reports' activations over their t, not
    unknown."""
    config = _config(any_broker, tmp_path, rate=100.0, until=1e-30, run_timeout=1.5)
    _, fake, summary = await _run_with_fakes(config, any_broker, 4, seed=2, periodic=False)
    assert summary is not None
    assert summary.stop_reason == "timeout"
    assert summary.missing_finals == ()
    assert not any(json.loads(line)["kind"] == "point" for line in (tmp_path / "run.jsonl").open())
    assert summary.activations == int(fake.counts.sum()) // 2 > 0
    # Every fake node reports its final state at the same t: the shares-weighted t is it.
    assert summary.rate_achieved == pytest.approx(
        config.rate * summary.activations / fake.t, rel=1e-12
    )


async def test_the_run_stops_on_the_exact_curve_and_t_eps_is_its_first_crossing(
    amqtt: RunningBroker, tmp_path: Path
) -> None:
    config = _config(amqtt, tmp_path, graph="line:6", rate=300.0, until=1e-6)
    coord, fake, summary = await _run_with_fakes(
        config, amqtt, 6, seed=3, trace_step=config.rate * 0.025
    )
    assert summary is not None
    assert summary.reached
    assert summary.stop_reason == "reached"
    # The process's own first grid time at or below eps is the summary's t_eps.
    first = next(g for g, error in fake.grid if error <= config.until)
    assert summary.t_eps == pytest.approx(first)
    assert summary.wall_s == pytest.approx(first / config.rate)
    assert summary.exact_points == len(coord.state.exact) > 0
    assert summary.exact_note == ""
    lines = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    reached = next(line for line in lines if line["kind"] == "reached")
    assert reached["exact"] is True
    assert reached["t_eps"] == summary.t_eps
    # The decision came once three exact points in a row were at or below eps.
    exact = [line for line in lines if line["kind"] == "exact" and line["wall"] <= reached["wall"]]
    below = [line["error"] <= config.until for line in exact]
    assert any(all(below[k : k + 3]) for k in range(len(below) - 2))
    written = json.loads((tmp_path / "run.json").read_text())
    assert written["t_eps"] == summary.t_eps


async def test_bad_registrations_get_clear_errors(amqtt: RunningBroker, tmp_path: Path) -> None:
    config = _config(amqtt, tmp_path, values=None, graph="line:2")
    coord = Coordinator(config)
    ctx = zmq.asyncio.Context()
    try:
        async with asyncio.TaskGroup() as tg:
            run = tg.create_task(coord.run())
            await coord.bound.wait()
            no_value = await register(ctx, config.bind, "a", 7000, None)
            assert isinstance(no_value, RegisterError)
            assert "without a value" in no_value.reason
            sock = ctx.socket(zmq.DEALER)
            sock.connect(config.bind)
            await sock.send(b"\x93garbage")
            bad = decode(await sock.recv())
            assert isinstance(bad, RegisterError)
            assert "bad message" in bad.reason
            await sock.send(encode(Request(src=0, edge=0, seq=1, ack=0, t=0.0, u=(1.0,))))
            wrong = decode(await sock.recv())
            assert isinstance(wrong, RegisterError)
            assert "register" in wrong.reason
            sock.close(0)
            a = register(ctx, config.bind, "a", 7000, 3.0)
            b = register(ctx, config.bind, "b", 7001, 5.0)
            boots = await asyncio.gather(a, b)
            assert sorted(bt.initial_value for bt in boots if isinstance(bt, Bootstrap)) == [
                (3.0,),
                (5.0,),
            ]
            late = await register(ctx, config.bind, "c", 7002, 1.0)
            assert isinstance(late, RegisterError)
            assert "not part of this cluster" in late.reason
            again = await register(ctx, config.bind, "b", 7001, 5.0)
            assert isinstance(again, Bootstrap)
            assert again == next(
                bt for bt in boots if isinstance(bt, Bootstrap) and bt.node_id == again.node_id
            )
            run.cancel()
    except* asyncio.CancelledError:
        pass
    finally:
        ctx.destroy(0)
    assert coord.stats.malformed == 2


async def test_registration_timeout_names_how_many_came(tmp_path: Path) -> None:
    config = _config(None, tmp_path, register_timeout=1.0)
    coord = Coordinator(config)
    ctx = zmq.asyncio.Context()

    async def lonely() -> None:
        await coord.bound.wait()
        sock = ctx.socket(zmq.DEALER)
        sock.connect(config.bind)
        await sock.send(encode(Register("lonely", "tcp://127.0.0.1:7000", None, 1)))
        await asyncio.sleep(0.3)
        sock.close(0)

    try:
        with pytest.raises(TransportError, match="only 1 of 4 nodes registered") as info:
            await asyncio.gather(coord.run(), lonely())
    finally:
        ctx.destroy(0)
    assert "lonely" in str(info.value)


def test_bad_settings_are_named() -> None:
    with pytest.raises(ConfigError, match="--expect 5"):
        Coordinator(CoordinatorConfig(graph="grid:2x2", expect=5))
    with pytest.raises(ConfigError, match="--rate"):
        Coordinator(CoordinatorConfig(rate=-1.0))
    with pytest.raises(ConfigError, match="mqtt://"):
        Coordinator(CoordinatorConfig(broker="http://x"))
    with pytest.raises(ConfigError, match="--cluster"):
        Coordinator(CoordinatorConfig(cluster="a/b"))


async def test_a_restarted_coordinator_resumes_the_run(
    amqtt: RunningBroker, tmp_path: Path
) -> None:
    config = _config(amqtt, tmp_path, rate=150.0, until=1e-5)
    first = Coordinator(config)
    ctx = zmq.asyncio.Context()
    try:
        async with asyncio.TaskGroup() as tg:
            run1 = tg.create_task(first.run())
            await first.bound.wait()
            boots = await _register_all(ctx, config, 4)
            fake = FakeCluster(boots, seed=2)
            nodes = tg.create_task(fake.run(amqtt.host, amqtt.port))
            for _ in range(200):
                if len(first.state.history) >= 3:
                    break
                await asyncio.sleep(0.05)
            run1.cancel()  # the coordinator dies mid-run; the nodes go on
            await asyncio.sleep(0.3)
            assert not nodes.done()
            second = Coordinator(config)
            run2 = tg.create_task(second.run())
            summary = await run2
    finally:
        ctx.destroy(0)
    assert second.resumed
    assert summary is not None
    assert summary.run_id == first.state.run_id
    assert summary.reached
    assert summary.mass_drift_rel is not None
    assert summary.mass_drift_rel <= 1e-9
    # A restarted node would get its bootstrap back from the new coordinator.
    assert second.registry.assignment is not None
    assert second.registry.assignment.epoch == boots[0].epoch
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert "resume" in kinds


async def test_a_coordinator_killed_while_stopping_is_restarted_into_stopping(
    amqtt: RunningBroker, tmp_path: Path
) -> None:
    # keep_running: only the restored stop decision can end the second coordinator's run.
    config = _config(amqtt, tmp_path, keep_running=True, stop_timeout=2.0)
    first = Coordinator(config)
    ctx = zmq.asyncio.Context()
    try:
        async with asyncio.TaskGroup() as tg:
            run1 = tg.create_task(first.run())
            await first.bound.wait()
            boots = await _register_all(ctx, config, 4)
            nodes = tg.create_task(FakeCluster(boots, seed=3).run(amqtt.host, amqtt.port))
            async with asyncio.timeout(30):
                while len(first.state.history) < 3:  # noqa: ASYNC110 (no event for a count)
                    await asyncio.sleep(0.05)
            run1.cancel()  # dies mid-run...
            status = await _retained_status(amqtt, config.cluster)
            # ... as it had just decided to stop (what _stop publishes first), the final
            # reports not in yet: the status a coordinator killed while stopping leaves.
            status["phase"] = "stopping"
            status["progress"] = {**status["progress"], "stop": "asked"}  # type: ignore[dict-item]
            async with aiomqtt.Client(amqtt.host, amqtt.port) as client:
                topic = f"gossip/{config.cluster}/coordinator/status"
                await client.publish(topic, json.dumps(status), qos=1, retain=True)
            second = Coordinator(config)
            summary = await asyncio.wait_for(tg.create_task(second.run()), 60)
            nodes.cancel()
    finally:
        ctx.destroy(0)
    assert second.resumed
    assert summary is not None
    assert summary.stop_reason == "asked"  # the first coordinator's decision, carried out
    assert summary.run_id == first.state.run_id
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    resumes = [json.loads(line) for line in lines if json.loads(line)["kind"] == "resume"]
    assert [r["stop"] for r in resumes] == ["asked"]


@pytest.mark.broker
async def test_a_broker_gone_past_the_deadline_fails_the_run_naming_it(
    mosquitto: RunningBroker, tmp_path: Path
) -> None:
    import signal

    import psutil

    config = _config(mosquitto, tmp_path, broker_deadline=1.0, stop_timeout=1.0)
    coord = Coordinator(config)
    ctx = zmq.asyncio.Context()
    try:
        run = asyncio.create_task(coord.run())
        await coord.bound.wait()
        await _register_all(ctx, config, 4)
        async with asyncio.timeout(20):
            while coord.state.phase != "running":  # noqa: ASYNC110  (no event for the phase)
                await asyncio.sleep(0.02)
        broker = [p for p in psutil.Process().children() if p.name() == "mosquitto"]
        broker[0].send_signal(signal.SIGKILL)  # and it never comes back
        summary = await asyncio.wait_for(run, 30)
    finally:
        ctx.destroy(linger=0)
    assert summary is not None
    assert summary.stop_reason == "broker-lost"
    assert not summary.reached
    assert summary.missing_finals == ("n0", "n1", "n2", "n3")
    assert summary.final_error is None
    assert summary.mass_drift_rel is None
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["failure"].startswith(f"lost the broker {mosquitto.url}")
    assert "--broker-deadline 1 s" in record["failure"]


@pytest.mark.parametrize(("later", "diverged"), [(2e-3, False), (600.0, True)])
def test_a_resumed_coordinator_judges_divergence_from_the_runs_start(
    tmp_path: Path, later: float, diverged: bool
) -> None:
    # A coordinator restarted mid-run (the chaos test's seed 1) has the run's initial values
    # from the retained status but no exact curve yet: its first point is an estimate that sat
    # three decades below the truth (6.9e-7 against about 1e-3), and the next, ordinary one
    # (2e-3) stopped a healthy run as "diverged". Growth counts from the run's start (one-hot
    # on line:4: 0.375); a real explosion still counts.
    coord = Coordinator(_config(None, tmp_path, until=1e-9))
    coord.state.initial = [(1.0,), (0.0,), (0.0,), (0.0,)]
    coord.state.record(ErrorPoint(272.1, 6.9e-7, 0.0, 0.0), may_reach=False)
    coord.state.record(ErrorPoint(354.2, later, 0.0, 8.0), may_reach=False)
    assert run_diverged(coord.state, False, coord.config.until, True) is diverged


@pytest.mark.parametrize("fresh", [False, True])
def test_an_explosion_seen_only_in_reports_far_apart_is_not_divergence(
    tmp_path: Path, fresh: bool
) -> None:
    # After a broker outage the coordinator held one node's report from t = 42 and the others'
    # from hundreds of t later; mixed to their median t, the estimate's error was 681,705
    # (1.5 million times the start) and a healthy run was stopped as "diverged". Only an
    # estimate of reports close in t (Evaluation.fresh) may say so.
    coord = Coordinator(_config(None, tmp_path, until=1e-9))
    coord.state.initial = [(1.0,), (0.0,), (0.0,), (0.0,)]
    coord.state.record(ErrorPoint(15.6, 0.099, 0.0, 0.0), may_reach=False)
    coord.state.record(ErrorPoint(48.5, 681_704.9, 110.5, 3.0), may_reach=False)
    assert run_diverged(coord.state, False, coord.config.until, fresh) is fresh


@contextlib.asynccontextmanager
async def _slow_proxy(host: str, port: int, delay: float) -> AsyncIterator[int]:
    """A TCP relay to ``host:port`` that holds each connection ``delay`` s before relaying it
    (a broker slow to answer, as on a loaded machine): its port."""

    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except OSError:
            pass
        finally:
            dst.close()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(delay)
        up_reader, up_writer = await asyncio.open_connection(host, port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def test_a_restarted_coordinator_slow_to_reach_the_broker_still_resumes(
    amqtt: RunningBroker, tmp_path: Path
) -> None:
    # Restarted on a loaded machine, the coordinator took over a second to get its MQTT
    # session: it gave up on the retained status, started a fresh run over the running one and
    # waited for registrations that never came (the chaos test, seed 1). It waits for the
    # broker now; here the broker answers 2.5 s late.
    config = _config(amqtt, tmp_path, rate=150.0, until=1e-5)
    first = Coordinator(config)
    ctx = zmq.asyncio.Context()
    try:
        async with asyncio.TaskGroup() as tg, _slow_proxy(amqtt.host, amqtt.port, 2.5) as port:
            run1 = tg.create_task(first.run())
            await first.bound.wait()
            boots = await _register_all(ctx, config, 4)
            fake = FakeCluster(boots, seed=3)
            tg.create_task(fake.run(amqtt.host, amqtt.port))
            async with asyncio.timeout(30):
                while len(first.state.history) < 3:  # noqa: ASYNC110 -- a count: no event
                    await asyncio.sleep(0.05)
            run1.cancel()  # the coordinator dies mid-run; the nodes go on
            slow = dataclasses.replace(config, broker=f"mqtt://127.0.0.1:{port}")
            second = Coordinator(slow)
            summary = await tg.create_task(second.run())
    finally:
        ctx.destroy(0)
    assert second.resumed, second.state.message
    assert summary is not None
    assert summary.run_id == first.state.run_id
    assert summary.reached
