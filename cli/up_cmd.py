"""``gossip up``: a whole live cluster on this machine (broker, coordinator, supervised nodes).

Every option can also be set by an environment variable ``GOSSIP_<NAME>`` (``--rate`` is
``GOSSIP_RATE``, ``--dashboard-port`` is ``GOSSIP_DASHBOARD_PORT``), so containers can be
configured by their environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from continuized.cli._app import app
from continuized.cli._cluster_view import (
    fell_behind,
    hold_dashboard,
    print_failure,
    print_summary,
    progress_bar,
    timeout_advice,
)
from continuized.cli._errors import fail, reported_errors, warn
from continuized.cli._saving import kept
from continuized.cli.entries import NODE_ENTRIES
from continuized.cli.options.cluster import (
    Algorithm,
    Cluster,
    DashHost,
    DashPort,
    DashRuns,
    DashToken,
    Graph,
    MetricsFile,
    Rate,
    Until,
    UpTimeout,
    check_dashboard,
    check_hold,
)
from continuized.cli.options.envvars import env
from continuized.cli.options.objective import Data, Dim, Problem, Split, Values, live_objective
from continuized.cli.options.output import JsonOut
from continuized.cli.options.panels import DASHBOARD, DEPLOYMENT, OUTPUT, PROCESSES, SECURITY
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
from continuized.coordinator.machine.ports import check_port_free

if TYPE_CHECKING:
    from continuized.coordinator.figures.records import RunSummary
    from continuized.coordinator.figures.state import ClusterState

__all__ = ["parse_hold", "up"]


@app.command()
def up(
    graph: Graph = "grid:4x4",
    algorithm: Algorithm = "",
    rate: Rate = 500.0,
    until: Until = 1e-6,
    values: Values = "onehot",
    dim: Dim = 1,
    json_out: JsonOut = None,
    broker: Annotated[
        str | None,
        typer.Option(
            envvar=env("broker"),
            help="mqtt://host:port of an external broker (default: an embedded one).",
            rich_help_panel=DEPLOYMENT,
        ),
    ] = None,
    embedded_broker: Annotated[
        str,
        typer.Option(
            envvar=env("embedded_broker"),
            help="auto (mosquitto if installed, else in-process amqtt), mosquitto or amqtt; "
            "both enforce the run's MQTT passwords and ACL. mosquitto is looked up on the PATH "
            "and in /usr/sbin; GOSSIP_MOSQUITTO=PATH names it, GOSSIP_MOSQUITTO=none hides it.",
            rich_help_panel=DEPLOYMENT,
        ),
    ] = "auto",
    metrics_file: MetricsFile = Path("gossip-run.jsonl"),
    metrics_period: Annotated[
        float | None,
        typer.Option(
            envvar=env("metrics_period"),
            help="Seconds between two node state reports (default: 0.1; longer past 10 node "
            "processes or 50 nodes, to stay near 100 report wake-ups and 500 reports a second "
            "in all).",
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    timeout: UpTimeout = 120.0,
    cluster: Cluster = "gossip",
    log_dir: Annotated[
        Path | None,
        typer.Option(
            envvar=env("log_dir"),
            help="Node logs (default: a temporary directory).",
            rich_help_panel=OUTPUT,
        ),
    ] = None,
    node_arg: Annotated[
        list[str] | None,
        typer.Option(
            envvar=env("node_arg"),
            help="Extra argument for every node, repeatable (e.g. --node-arg=--fault "
            "--node-arg=drop=0.1).",
            rich_help_panel=PROCESSES,
        ),
    ] = None,
    nodes_per_process: Annotated[
        int,
        typer.Option(
            envvar=env("nodes_per_process"),
            help="Host mode: up to this many nodes per OS process (one event loop, each node "
            "with its own sockets and identity); 1: one process per node.",
            rich_help_panel=PROCESSES,
        ),
    ] = 1,
    fork_server: Annotated[
        bool,
        typer.Option(
            envvar=env("fork_server"),
            help="Fork the node processes from one process that imported the node code "
            "(milliseconds each); --no-fork-server: a fresh interpreter per process (~0.7 s "
            "of CPU each).",
            rich_help_panel=PROCESSES,
        ),
    ] = True,
    max_restarts: Annotated[
        int,
        typer.Option(
            envvar=env("max_restarts"),
            help="Restart a crashed node process on its address and under its name (it "
            "recovers its state from its neighbours) at most this many times each; one crash "
            "more fails the run.",
            rich_help_panel=PROCESSES,
        ),
    ] = 3,
    restart_on_new_address: Annotated[
        bool,
        typer.Option(
            envvar=env("restart_on_new_address"),
            help="Restart a crashed node process on a fresh port, as DHCP or a new container "
            "would: it tells its neighbours its new address as it recovers.",
            rich_help_panel=PROCESSES,
        ),
    ] = False,
    dashboard_port: DashPort = None,
    dashboard_host: DashHost = "127.0.0.1",
    dashboard_token: DashToken = "",
    dashboard_runs_dir: DashRuns = Path("gossip-runs"),
    hold: Annotated[
        str,
        typer.Option(
            envvar=env("hold"),
            help="With --dashboard-port: after the run, keep the dashboard up this many "
            "seconds, or 'forever' (Ctrl-C ends it).",
            rich_help_panel=DASHBOARD,
        ),
    ] = "0",
    quiet: Annotated[bool, typer.Option(help="No progress bar.", rich_help_panel=OUTPUT)] = False,
    insecure: Annotated[
        bool,
        typer.Option(
            envvar=env("insecure"),
            help="Plain sockets and anonymous MQTT, for benchmarks only (default: CurveZMQ "
            "with fresh keys, MQTT passwords and ACL).",
            rich_help_panel=SECURITY,
        ),
    ] = False,
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
) -> None:
    """Run a whole cluster here: embedded broker, coordinator and one process per node
    (or per --nodes-per-process nodes).

    Every setting, output paths included, is checked before the broker or any node starts
    (a bad one: exit 2). Exit 1: the run failed (eps not reached, diverged, a node crashed
    too often); 3: the run ended but --json or --metrics-file could not be written (its
    record is then kept in a fallback file, named on stderr).
    """
    import asyncio
    import dataclasses
    import shutil
    import tempfile

    from continuized.coordinator.figures.records import error_text
    from continuized.coordinator.figures.train_figures import accuracy_not_reached
    from continuized.coordinator.local.launcher import NodeCrashError
    from continuized.coordinator.local.settings import UpConfig, check_up
    from continuized.coordinator.local.supervise import Supervision
    from continuized.coordinator.run.evaluation import divergence_text
    from continuized.coordinator.run.service import CoordinatorConfig

    with reported_errors():
        if metrics_period is None:
            from continuized.coordinator.local.node_commands import default_metrics_period
            from continuized.gossip.graph.topology import parse_topology

            metrics_period = default_metrics_period(parse_topology(graph).n, nodes_per_process)
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
        coord = CoordinatorConfig(
            graph=graph,
            algorithm=algorithm,
            rate=rate,
            values=values,
            dim=dim,
            until=until,
            cluster=cluster,
            metrics_file=metrics_file,
            json_path=json_out,
            metrics_period=metrics_period,
            dashboard_port=dashboard_port,
            dashboard_host=dashboard_host,
            dashboard_token=dashboard_token,
            dashboard_runs_dir=dashboard_runs_dir,
            problem=objective.problem,
            data=objective.data,
            split=objective.split,
            training=objective.training,
            until_accuracy=until_accuracy,
            training_runs=training_runs,
        )
        config = UpConfig(
            coordinator=coord,
            log_dir=log_dir if log_dir is not None else Path(tempfile.gettempdir()),
            entries=NODE_ENTRIES,
            broker=broker,
            embedded=embedded_broker,  # type: ignore[arg-type]
            timeout=timeout,
            node_args=tuple(node_arg or ()),
            nodes_per_process=nodes_per_process,
            fork=fork_server,
            max_restarts=max_restarts,
            secure=not insecure,
        )
        if insecure:
            warn(
                "--insecure turns off authentication: any process that reaches a node's port "
                "can pose as its neighbour and change the values, and anyone on the broker can "
                "publish reports and stop commands. For benchmarks only.",
                "INSECURE",
            )
        # Every setting is checked before anything starts: a bad one leaves no broker, no
        # node and no file behind.
        prepared = check_up(config)
        _check_node_args(config.node_args)
        _warn_below_float_floor(until, prepared[1].values)
        hold_s = parse_hold(hold)
        check_hold(hold, hold_s, dashboard_port)
        check_dashboard(dashboard_port)
        check_port_free("--dashboard-port", dashboard_host, dashboard_port)
        own_logs = log_dir is None
        logs = Path(tempfile.mkdtemp(prefix="gossip-up-")) if log_dir is None else log_dir
        config = dataclasses.replace(config, log_dir=logs)
        sup = Supervision(max_restarts, new_address=restart_on_new_address)
        holder: dict[str, Any] = {}
        try:
            summary, state = asyncio.run(_up(config, quiet, prepared, sup, holder))
        except BaseException as exc:
            started = "state" in holder
            if started:
                # The run failed: say what happened (the --json file says it too) before the
                # error. A run that never started (no broker) has nothing to say but the error.
                print_failure(sup, prepared[0], coord)
            if sup.unwritten and sup.record is not None:
                kept("up", sup.unwritten, sup.record)  # the line; the run's error decides
            if own_logs and not isinstance(exc, KeyboardInterrupt | asyncio.CancelledError):
                if started or _logs_say_something(logs):
                    typer.echo(f"node logs kept in {logs}", err=True)
                else:
                    shutil.rmtree(logs, ignore_errors=True)
            if isinstance(exc, KeyboardInterrupt):
                raise fail("interrupted: every node and the broker were stopped", 130) from None
            if isinstance(exc, asyncio.CancelledError):  # SIGTERM: the handler cancelled main
                raise fail("terminated: every node and the broker were stopped", 143) from None
            if isinstance(exc, NodeCrashError):  # the run failed, as a timeout does: code 1
                raise fail(str(exc), 1) from None
            raise
    if own_logs:
        shutil.rmtree(logs, ignore_errors=True)
    print_summary(summary, state, coord, sup)
    if summary.kept_up is False:
        warn(fell_behind(summary, coord.rate, prepared[0].expected))
    if metrics_file is not None and not any(u.startswith("--metrics-file") for u in sup.unwritten):
        typer.echo(f"metrics: {metrics_file}", err=True)
    # An output that could not be written is said (and the record kept) apart from the run's
    # result, which stands: exit 3, unless the run failed itself (exit 1).
    lost = kept("up", sup.unwritten, sup.record or {}) if sup.unwritten else None
    if hold_s > 0 and dashboard_port is not None:
        hold_dashboard(state, coord, hold_s)
    if summary.stop_reason == "diverged" and state.training is not None:
        raise fail(f"the training diverged: {divergence_text(state)}", code=1)
    if summary.stop_reason == "diverged":
        raise fail(
            f"the run diverged (final error {error_text(summary.final_error)}): the exchanges "
            f"cannot keep up with --rate {rate:g} on this machine; try a lower --rate",
            code=1,
        )
    short_of_accuracy = None if summary.reached else accuracy_not_reached(state, timeout)
    if short_of_accuracy is not None:
        raise fail(short_of_accuracy, code=1)
    if not summary.reached:
        raise fail(
            f"the error did not reach {until:g} within --timeout {timeout:g} s "
            f"(final error {error_text(summary.final_error)}); "
            + timeout_advice(summary, state, timeout),
            code=1,
        )
    if lost is not None:
        raise lost


def _logs_say_something(logs: Path) -> bool:
    """Whether a log in ``logs`` (the fork server's, before any node) has anything in it."""
    return any(log.stat().st_size > 0 for log in logs.glob("*.log"))


def _warn_below_float_floor(until: float, values: Any) -> None:
    """Warn when ``--until`` is below what float64 can hold near the mean of ``values``."""
    from continuized.gossip.model.values import error_floor

    if values is None:  # the nodes bring their own values (or an optimization run)
        return
    floor = error_floor(values)
    if until < floor:
        warn(
            f"--until {until:g} is below the smallest error float64 can hold near these values' "
            f"mean ({floor:.3g}, half a squared ulp): the run reaches it only if every value "
            "becomes the mean exactly, by chance, and then stops with a measured error of 0."
        )


def parse_hold(text: str) -> float:
    """Seconds from ``--hold``: a number >= 0, or ``forever`` / ``inf`` (until Ctrl-C).

    Raises
    ------
    ConfigError
        Anything else, quoting it.
    """
    import math

    from continuized.gossip.errors import ConfigError

    if text.strip().lower() in ("forever", "inf", "infinity"):
        return math.inf
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise ConfigError(f"--hold must be a number of seconds >= 0 or 'forever', got {text!r}")
    return seconds


def _check_node_args(node_args: tuple[str, ...]) -> None:
    """Parse ``--node-arg`` values as ``gossip node`` will, without starting a node.

    Raises
    ------
    ConfigError
        An argument ``gossip node`` would refuse, with its own message.
    """
    from continuized.gossip.errors import ConfigError

    if not node_args:
        return
    node = typer.main.get_command(app).commands["node"]  # type: ignore[attr-defined]
    # The launcher supplies these itself; placeholders make the parse complete.
    argv = ["--coordinator", "tcp://127.0.0.1:1", "--name", "check", *node_args]
    try:
        ctx = node.make_context("gossip node", argv)
    except typer.TyperException as exc:  # typer's click usage errors derive from it
        detail = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        raise ConfigError(f"--node-arg {' '.join(node_args)!r}: {detail}") from None
    fault = ctx.params.get("fault")
    if fault:
        from continuized.node.transport.faults import parse_faults

        parse_faults(fault)


async def _up(
    config: Any,
    quiet: bool,
    prepared: Any = None,
    supervision: Any = None,
    holder: dict[str, Any] | None = None,
) -> tuple[RunSummary, ClusterState]:
    """Run the cluster; ``holder["state"]`` is set once the broker is up and the run starts."""
    import asyncio
    import signal

    from continuized.coordinator.local.launcher import run_up
    from continuized.coordinator.run._groups import single_error
    from continuized.gossip.wire.pubsub import redact_broker

    # SIGTERM gets the same orderly shutdown as Ctrl-C: cancel, stop every child, exit.
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if main is not None:
        loop.add_signal_handler(signal.SIGTERM, main.cancel)
    holder = {} if holder is None else holder

    def started(state: ClusterState, broker: Any) -> None:
        holder["state"] = state
        typer.echo(
            f"broker {redact_broker(broker.url)} ({broker.kind}); starting "
            f"{state.expected} nodes on {state.graph}",
            err=True,
        )

    with single_error():
        async with asyncio.TaskGroup() as tg:
            bar = None if quiet else tg.create_task(progress_bar(holder), name="progress")
            try:
                summary = await run_up(config, started, prepared, supervision)
            finally:
                if bar is not None:
                    bar.cancel()
    return summary, holder["state"]
