"""``gossip coordinator``: the coordinator of a live cluster (``gossip up`` is :mod:`cli.up_cmd`).

Every option can also be set by an environment variable ``GOSSIP_<NAME>`` (``--rate`` is
``GOSSIP_RATE``, ``--dashboard-port`` is ``GOSSIP_DASHBOARD_PORT``), so containers can be
configured by their environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from continuized.cli._app import app
from continuized.cli._cluster_view import (
    hold_dashboard,
    print_summary,
    timeout_advice,
    with_log_lines,
)
from continuized.cli._errors import fail, reported_errors, warn
from continuized.cli._saving import kept
from continuized.cli.options.cluster import (
    Algorithm,
    BrokerDeadline,
    Cluster,
    DashHost,
    DashPort,
    DashRuns,
    DashToken,
    DeadAfter,
    Graph,
    MetricsFile,
    MetricsPeriod,
    MqttCa,
    Rate,
    Timeout,
    Until,
    check_dashboard,
    check_hold,
)
from continuized.cli.options.envvars import env
from continuized.cli.options.objective import Data, Dim, Problem, Split, live_objective
from continuized.cli.options.output import JsonOut
from continuized.cli.options.panels import (
    DASHBOARD,
    DEPLOYMENT,
    MEMBERSHIP,
    OBJECTIVE,
    RUN,
    SECURITY,
)
from continuized.cli.options.training import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_INIT,
    DEFAULT_LR,
    DEFAULT_MOMENTUM,
    DEFAULT_RATE_COM,
    BatchSize,
    Init,
    Lr,
    Momentum,
    RateCom,
    Train,
    TrainingRuns,
    TrainSeed,
    UntilAccuracy,
)
from continuized.coordinator.machine.interfaces import check_zmq_bind, connect_address
from continuized.coordinator.machine.ports import check_port_free
from continuized.coordinator.run.config import BROKER_WAIT

if TYPE_CHECKING:
    from continuized.coordinator.run.config import CoordinatorConfig

__all__ = ["coordinator"]


@app.command()
def coordinator(
    graph: Graph = "grid:4x4",
    expect: Annotated[
        int | None,
        typer.Option(
            envvar=env("expect"),
            help="Nodes to wait for (the graph's node count).",
            rich_help_panel=RUN,
        ),
    ] = None,
    broker: Annotated[
        str,
        typer.Option(
            envvar=env("broker"),
            help="mqtt://host:port for metrics, as the nodes reach it ('' for none).",
            rich_help_panel=DEPLOYMENT,
        ),
    ] = "",
    bind: Annotated[
        str,
        typer.Option(
            envvar=env("bind"),
            help="ZeroMQ address for node registration.",
            rich_help_panel=DEPLOYMENT,
        ),
    ] = "tcp://0.0.0.0:5555",
    algorithm: Algorithm = "",
    rate: Rate = 500.0,
    values: Annotated[
        str | None,
        typer.Option(
            envvar=env("values"),
            help="onehot, onehot:K, gaussian:SEED, uniform:SEED or file:PATH; default: each "
            "node's own --value.",
            rich_help_panel=OBJECTIVE,
        ),
    ] = None,
    dim: Dim = 1,
    until: Until = 1e-6,
    cluster: Cluster = "gossip",
    metrics_file: MetricsFile = None,
    json_out: JsonOut = None,
    metrics_period: MetricsPeriod = 0.1,
    register_timeout: Annotated[
        float,
        typer.Option(
            envvar=env("register_timeout"),
            help="Seconds to wait for every node.",
            rich_help_panel=RUN,
        ),
    ] = 60.0,
    start_delay: Annotated[
        float,
        typer.Option(
            envvar=env("start_delay"), help="Seconds from bootstrap to t = 0.", rich_help_panel=RUN
        ),
    ] = 1.5,
    timeout: Timeout = None,
    dead_after: DeadAfter = None,
    broker_deadline: BrokerDeadline = None,
    broker_wait: Annotated[
        float,
        typer.Option(
            envvar=env("broker_wait"),
            help="Seconds to wait for the broker at the start; not reached by then (or a "
            "refused login, at once): an error naming it, exit 2. Lost later: waited for.",
            rich_help_panel=DEPLOYMENT,
        ),
    ] = BROKER_WAIT,
    allow_joins: Annotated[
        bool,
        typer.Option(
            envvar=env("allow_joins"),
            help="Attach nodes that register after the start (gossip node --join --value X).",
            rich_help_panel=MEMBERSHIP,
        ),
    ] = False,
    keep_running: Annotated[
        bool,
        typer.Option(
            envvar=env("keep_running"),
            help="Never stop the nodes; measure forever.",
            rich_help_panel=RUN,
        ),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            envvar=env("resume"),
            help="Pick up a running run left on the status topic.",
            rich_help_panel=RUN,
        ),
    ] = True,
    weighted: Annotated[
        bool,
        typer.Option(
            envvar=env("weighted"), help="P_e proportional to edge weights.", rich_help_panel=RUN
        ),
    ] = False,
    dashboard_port: DashPort = None,
    dashboard_host: DashHost = "127.0.0.1",
    dashboard_token: DashToken = "",
    dashboard_runs_dir: DashRuns = None,
    keys: Annotated[
        Path | None,
        typer.Option(
            envvar=env("keys"),
            help="Key directory (gossip keys init: DIR/coordinator): CurveZMQ registration, "
            "the nodes' allow-list, MQTT passwords per role. Without it: insecure.",
            rich_help_panel=SECURITY,
        ),
    ] = None,
    mqtt_ca: MqttCa = None,
    hold: Annotated[
        float,
        typer.Option(
            envvar=env("hold"),
            help="After the run, keep serving the dashboard this many seconds (inf: until "
            "stopped), e.g. in a container.",
            rich_help_panel=DASHBOARD,
        ),
    ] = 0.0,
    problem: Problem = "",
    data: Data = "",
    split: Split = "",
    train: Train = "",
    rate_com: RateCom = DEFAULT_RATE_COM,
    lr: Lr = DEFAULT_LR,
    momentum: Momentum = DEFAULT_MOMENTUM,
    batch_size: BatchSize = DEFAULT_BATCH_SIZE,
    init: Init = DEFAULT_INIT,
    train_seed: TrainSeed = 0,
    until_accuracy: UntilAccuracy = None,
    training_runs: TrainingRuns = 150,
    standing: Annotated[
        bool,
        typer.Option(
            envvar=env("standing"),
            help="Stay up and run what `gossip submit` sends, one run after another, on the "
            "same standing nodes (gossip node --standing); the options above are each run's "
            "defaults. Needs --broker.",
            rich_help_panel=RUN,
        ),
    ] = False,
) -> None:
    """Bootstrap the nodes, then measure the error over MQTT and stop them at eps.

    Exit 2: a bad setting (output paths included, checked before anything starts); 1: the
    error did not reach eps; 3: --json or --metrics-file could not be written at the end (the
    record is then kept in a fallback file, named on stderr).
    """
    import asyncio

    from continuized.coordinator.figures.records import error_text
    from continuized.coordinator.run.service import Coordinator, CoordinatorConfig, prepare

    with reported_errors():
        objective = live_objective(
            problem=problem,
            data=data,
            split=split,
            train=train,
            algorithm=algorithm,
            rate_com=rate_com,
            lr=lr,
            momentum=momentum,
            batch_size=batch_size,
            init=init,
            train_seed=train_seed,
        )
    config = CoordinatorConfig(
        graph=graph,
        expect=expect,
        broker=broker,
        bind=bind,
        algorithm=algorithm,
        rate=rate,
        values=values,
        dim=dim,
        until=until,
        cluster=cluster,
        metrics_file=metrics_file,
        json_path=json_out,
        metrics_period=metrics_period,
        register_timeout=register_timeout,
        start_delay=start_delay,
        run_timeout=timeout,
        dead_after=dead_after,
        broker_deadline=broker_deadline,
        broker_wait=broker_wait,
        allow_joins=allow_joins,
        keep_running=keep_running,
        weighted=weighted,
        resume=resume,
        dashboard_port=dashboard_port,
        dashboard_host=dashboard_host,
        dashboard_token=dashboard_token,
        dashboard_runs_dir=dashboard_runs_dir,
        keys=keys,
        mqtt_ca=mqtt_ca,
        problem=objective.problem,
        data=objective.data,
        split=objective.split,
        training=objective.training,
        until_accuracy=until_accuracy,
        training_runs=training_runs,
    )
    with reported_errors():
        check_zmq_bind("--bind", bind)  # first: a bad one would surface after the broker wait
        if keys is None:
            warn("no --keys: registration and exchanges are not authenticated (insecure)")
        if standing:
            _standing(config)
            return
        state, plan = prepare(config)
        check_hold(f"{hold:g}", hold, dashboard_port)
        check_dashboard(dashboard_port)
        check_port_free("--dashboard-port", dashboard_host, dashboard_port)
        coord = Coordinator(config, state, plan)
        from continuized.gossip.wire.pubsub import redact_broker

        secured = (
            f"CurveZMQ, {len(plan.security.allowed)} node keys allowed"
            if plan.security is not None
            else "insecure"
        )
        typer.echo(
            f"coordinator: {graph} ({plan.expected} nodes), {plan.params.algorithm.value}, "
            f"rate {rate:g}/s, eps {until:g}; registration on {bind} ({secured}; nodes: gossip "
            f"node --coordinator {connect_address(bind)}), metrics "
            f"{redact_broker(broker) or 'off'}",
            err=True,
        )
        try:
            summary = asyncio.run(with_log_lines(coord.run(), state))
        except KeyboardInterrupt:
            raise fail("interrupted", code=130) from None
    if summary is None:
        return
    print_summary(summary, state, config)
    failures = coord.log.failures
    lost = kept("coordinator", failures, coord.record or {}) if failures else None
    if hold > 0 and dashboard_port is not None:
        hold_dashboard(state, config, hold)
    if not summary.reached:
        advice = (
            "; " + timeout_advice(summary, state, timeout)
            if timeout is not None and summary.stop_reason == "timeout"
            else ""
        )
        if summary.stop_reason == "broker-lost":
            advice = f"; {state.message}"  # the failure: which broker, for how long
        raise fail(
            f"the error did not reach {until:g} "
            f"(final error {error_text(summary.final_error)}){advice}",
            1,
        )
    if lost is not None:  # the run's result stands; an output it could not write: exit 3
        raise lost


def _standing(config: CoordinatorConfig) -> None:
    """``gossip coordinator --standing``: serve submitted runs until Ctrl-C or SIGTERM."""
    import asyncio
    import signal
    from typing import Any

    from continuized.coordinator.run.service import Coordinator
    from continuized.coordinator.run.standing import StandingCoordinator
    from continuized.gossip.wire.pubsub import Topics

    running: list[Coordinator] = []  # the run in progress, if any
    leaving = False

    async def one(run_config: CoordinatorConfig) -> dict[str, Any] | None:
        coord = Coordinator(run_config)
        running.append(coord)
        try:
            summary = await coord.run()
        finally:
            running.remove(coord)
        if summary is not None:
            print_summary(summary, coord.state, run_config)
        if leaving:  # asked to stop during the run: leave now that its nodes stopped
            task = asyncio.current_task()
            assert task is not None
            asyncio.get_running_loop().call_soon(task.cancel)
        return coord.record

    async def serve() -> None:
        standing = StandingCoordinator(config, one)
        task = asyncio.current_task()
        assert task is not None

        def terminate() -> None:
            # A container's stop (SIGTERM): a run in progress is stopped as at eps, so that
            # its standing nodes get its end and wait for the next coordinator; then leave.
            nonlocal leaving
            if running and not leaving:
                leaving = True
                running[0].request_stop("terminated")
            else:
                task.cancel()

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminate)
        typer.echo(
            f"coordinator: standing, {standing.expected} nodes ({config.graph}); waiting for "
            f"runs on {Topics(config.cluster).submit()} (gossip submit); nodes: gossip node "
            f"--standing --coordinator {connect_address(config.bind)}",
            err=True,
        )
        await standing.serve()

    try:
        asyncio.run(serve())
    except (KeyboardInterrupt, asyncio.CancelledError):
        typer.echo("coordinator: standing, stopped", err=True)
