"""``gossip coordinator`` and ``gossip up``: run the live cluster.

Every option can also be set by an environment variable ``GOSSIP_<NAME>`` (``--rate`` is
``GOSSIP_RATE``, ``--dashboard-port`` is ``GOSSIP_DASHBOARD_PORT``), so containers can be
configured by their environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli._app import app
from cli._cluster_view import (
    hold_dashboard,
    print_failure,
    print_summary,
    progress_bar,
    with_log_lines,
)
from cli._errors import fail, reported_errors, warn

if TYPE_CHECKING:
    from coordinator.records import RunSummary
    from coordinator.state import ClusterState

__all__ = ["coordinator", "up"]


def _env(name: str) -> str:
    return "GOSSIP_" + name.upper().replace("-", "_")


# Options shared by both commands, declared once.
Graph = Annotated[
    str, typer.Option(envvar=_env("graph"), help="Topology, e.g. grid:4x4, line:30, er:50:0.2:1.")
]
Algorithm = Annotated[str, typer.Option(envvar=_env("algorithm"), help="arg or rg.")]
Rate = Annotated[
    float, typer.Option(envvar=_env("rate"), help="Network-wide activations per second.")
]
Until = Annotated[float, typer.Option(envvar=_env("until"), help="Target error eps.")]
Cluster = Annotated[
    str, typer.Option(envvar=_env("cluster"), help="Cluster name: MQTT topics gossip/<cluster>/.")
]
MetricsFile = Annotated[
    Path | None,
    typer.Option(envvar=_env("metrics_file"), help="JSON-lines metrics file of the whole run."),
]
JsonOut = Annotated[
    Path | None, typer.Option("--json", envvar=_env("json"), help="Write the run summary here.")
]
MetricsPeriod = Annotated[
    float,
    typer.Option(envvar=_env("metrics_period"), help="Seconds between two node state reports."),
]
Dim = Annotated[int, typer.Option(envvar=_env("dim"), help="Components of each value.")]
DashPort = Annotated[
    int | None, typer.Option(envvar=_env("dashboard_port"), help="Serve the dashboard here.")
]
DashHost = Annotated[
    str, typer.Option(envvar=_env("dashboard_host"), help="Dashboard bind address.")
]
DashToken = Annotated[
    str,
    typer.Option(envvar=_env("dashboard_token"), help="Bearer token the dashboard requires."),
]
DashRuns = Annotated[
    Path | None,
    typer.Option(
        envvar=_env("dashboard_runs_dir"),
        help="Directory where the dashboard keeps finished runs, to overlay later runs of the "
        "same graph (e.g. RG then ARG).",
    ),
]
Problem = Annotated[
    str,
    typer.Option(
        envvar=_env("problem"),
        help="Optimize instead of averaging: logistic:LAMBDA, ridge:LAMBDA, quadratic or "
        "module:callable (dual accelerated coordinate descent; --until then applies to "
        "sum_v |x_v - x*|^2).",
    ),
]
Data = Annotated[
    str,
    typer.Option(
        envvar=_env("data"),
        help="With --problem: breast-cancer (default), diabetes, svmlight:PATH, csv:DIR, "
        "npz:PATH or synthetic:SEED. Each node loads its own shard; the coordinator loads it "
        "only to compute x* for the check.",
    ),
]
Split = Annotated[
    str,
    typer.Option(
        envvar=_env("split"),
        help="With --problem: how the data is cut, iid:SEED (default iid:0) or label:SEED.",
    ),
]
Timeout = Annotated[
    float | None,
    typer.Option(envvar=_env("timeout"), help="Give up this many seconds after t starts."),
]


@app.command()
def coordinator(
    graph: Graph = "grid:4x4",
    expect: Annotated[
        int | None,
        typer.Option(envvar=_env("expect"), help="Nodes to wait for (the graph's node count)."),
    ] = None,
    broker: Annotated[
        str,
        typer.Option(
            envvar=_env("broker"),
            help="mqtt://host:port for metrics, as the nodes reach it ('' for none).",
        ),
    ] = "",
    bind: Annotated[
        str, typer.Option(envvar=_env("bind"), help="ZeroMQ address for node registration.")
    ] = "tcp://0.0.0.0:5555",
    algorithm: Algorithm = "arg",
    rate: Rate = 500.0,
    values: Annotated[
        str | None,
        typer.Option(
            envvar=_env("values"),
            help="onehot, onehot:K, gaussian:SEED, uniform:SEED or file:PATH; default: each "
            "node's own --value.",
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
        typer.Option(envvar=_env("register_timeout"), help="Seconds to wait for every node."),
    ] = 60.0,
    start_delay: Annotated[
        float,
        typer.Option(envvar=_env("start_delay"), help="Seconds from bootstrap to t = 0."),
    ] = 1.5,
    timeout: Timeout = None,
    keep_running: Annotated[
        bool,
        typer.Option(envvar=_env("keep_running"), help="Never stop the nodes; measure forever."),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(envvar=_env("resume"), help="Pick up a running run left on the status topic."),
    ] = True,
    weighted: Annotated[
        bool, typer.Option(envvar=_env("weighted"), help="P_e proportional to edge weights.")
    ] = False,
    dashboard_port: DashPort = None,
    dashboard_host: DashHost = "127.0.0.1",
    dashboard_token: DashToken = "",
    dashboard_runs_dir: DashRuns = None,
    keys: Annotated[
        Path | None,
        typer.Option(
            envvar=_env("keys"),
            help="Key directory (gossip keys init: DIR/coordinator): CurveZMQ registration, "
            "the nodes' allow-list, MQTT passwords per role. Without it: insecure.",
        ),
    ] = None,
    mqtt_ca: Annotated[
        Path | None, typer.Option(envvar=_env("mqtt_ca"), help="CA (PEM) of an mqtts:// broker.")
    ] = None,
    hold: Annotated[
        float,
        typer.Option(
            envvar=_env("hold"),
            help="After the run, keep serving the dashboard this many seconds (inf: until "
            "stopped), e.g. in a container.",
        ),
    ] = 0.0,
    problem: Problem = "",
    data: Data = "",
    split: Split = "",
) -> None:
    """Bootstrap the nodes, then measure the error over MQTT and stop them at eps."""
    import asyncio

    from coordinator.service import Coordinator, CoordinatorConfig, prepare

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
        keep_running=keep_running,
        weighted=weighted,
        resume=resume,
        dashboard_port=dashboard_port,
        dashboard_host=dashboard_host,
        dashboard_token=dashboard_token,
        dashboard_runs_dir=dashboard_runs_dir,
        keys=keys,
        mqtt_ca=mqtt_ca,
        problem=problem,
        data=(data or "breast-cancer") if problem else data,
        split=(split or "iid:0") if problem else split,
    )
    with reported_errors():
        if keys is None:
            warn("no --keys: registration and exchanges are not authenticated (insecure)")
        state, plan = prepare(config)
        coord = Coordinator(config, state, plan)
        from coordinator.broker import redact_broker_url

        typer.echo(
            f"coordinator: {graph} ({plan.expected} nodes), {plan.params.algorithm.value}, "
            f"rate {rate:g}/s, eps {until:g}; registration on {bind}, metrics "
            f"{redact_broker_url(broker) or 'off'}",
            err=True,
        )
        try:
            summary = asyncio.run(with_log_lines(coord.run(), state))
        except KeyboardInterrupt:
            raise fail("interrupted", code=130) from None
    if summary is None:
        return
    print_summary(summary, state, config)
    if hold > 0 and dashboard_port is not None:
        hold_dashboard(state, config, hold)
    if not summary.reached:
        raise fail(f"the error did not reach {until:g} (final error {summary.final_error})", 1)


@app.command()
def up(
    graph: Graph = "grid:4x4",
    algorithm: Algorithm = "arg",
    rate: Rate = 500.0,
    until: Until = 1e-6,
    values: Annotated[
        str,
        typer.Option(
            envvar=_env("values"),
            help="Initial values: onehot, onehot:K, gaussian:SEED, uniform:SEED, file:PATH.",
        ),
    ] = "onehot",
    dim: Dim = 1,
    json_out: JsonOut = None,
    broker: Annotated[
        str | None,
        typer.Option(
            envvar=_env("broker"),
            help="mqtt://host:port of an external broker (default: an embedded one).",
        ),
    ] = None,
    embedded_broker: Annotated[
        str,
        typer.Option(
            envvar=_env("embedded_broker"),
            help="auto (mosquitto if installed, else in-process amqtt), mosquitto or amqtt.",
        ),
    ] = "auto",
    metrics_file: MetricsFile = Path("gossip-run.jsonl"),
    metrics_period: Annotated[
        float | None,
        typer.Option(
            envvar=_env("metrics_period"),
            help="Seconds between two node state reports (default: 0.1, and longer for over "
            "200 nodes, so that the broker and the coordinator get about 2,000 reports a second "
            "at most).",
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(envvar=_env("timeout"), help="Give up this many seconds after t starts."),
    ] = 120.0,
    cluster: Cluster = "gossip",
    log_dir: Annotated[
        Path | None,
        typer.Option(envvar=_env("log_dir"), help="Node logs (default: a temporary directory)."),
    ] = None,
    node_arg: Annotated[
        list[str] | None,
        typer.Option(
            envvar=_env("node_arg"),
            help="Extra argument for every node, repeatable (e.g. --node-arg=--fault "
            "--node-arg=drop=0.1).",
        ),
    ] = None,
    nodes_per_process: Annotated[
        int,
        typer.Option(
            envvar=_env("nodes_per_process"),
            help="Host mode: up to this many nodes per OS process (one event loop, each node "
            "with its own sockets and identity); 1: one process per node.",
        ),
    ] = 1,
    fork_server: Annotated[
        bool,
        typer.Option(
            envvar=_env("fork_server"),
            help="Fork the node processes from one process that imported the node code "
            "(milliseconds each); --no-fork-server: a fresh interpreter per process (~0.7 s "
            "of CPU each).",
        ),
    ] = True,
    max_restarts: Annotated[
        int,
        typer.Option(
            envvar=_env("max_restarts"),
            help="Restart a node process that crashes during the run, on its address and under "
            "its name (it recovers its state from its neighbours), at most this many times "
            "each; one crash more fails the run.",
        ),
    ] = 3,
    dashboard_port: DashPort = None,
    dashboard_host: DashHost = "127.0.0.1",
    dashboard_token: DashToken = "",
    dashboard_runs_dir: DashRuns = Path("gossip-runs"),
    hold: Annotated[
        str,
        typer.Option(
            envvar=_env("hold"),
            help="With --dashboard-port: after the run, keep the dashboard up this many "
            "seconds, or 'forever' (Ctrl-C ends it).",
        ),
    ] = "0",
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    insecure: Annotated[
        bool,
        typer.Option(
            envvar=_env("insecure"),
            help="Plain sockets and anonymous MQTT, for benchmarks only (default: CurveZMQ "
            "with fresh keys, MQTT passwords and ACL).",
        ),
    ] = False,
    problem: Problem = "",
    data: Data = "",
    split: Split = "",
) -> None:
    """Run a whole cluster here: embedded broker, coordinator and one process per node
    (or per --nodes-per-process nodes)."""
    import asyncio
    import dataclasses
    import shutil
    import tempfile

    from coordinator.launcher import NodeCrashError, UpConfig, check_up
    from coordinator.service import CoordinatorConfig
    from coordinator.supervise import Supervision

    with reported_errors():
        if metrics_period is None:
            from coordinator.launcher import default_metrics_period
            from gossip.topology import parse_topology

            metrics_period = default_metrics_period(parse_topology(graph).n)
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
            problem=problem,
            data=(data or "breast-cancer") if problem else data,
            split=(split or "iid:0") if problem else split,
        )
        config = UpConfig(
            coordinator=coord,
            log_dir=log_dir if log_dir is not None else Path(tempfile.gettempdir()),
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
        hold_s = parse_hold(hold)
        own_logs = log_dir is None
        logs = Path(tempfile.mkdtemp(prefix="gossip-up-")) if log_dir is None else log_dir
        config = dataclasses.replace(config, log_dir=logs)
        sup = Supervision(max_restarts)
        try:
            summary, state = asyncio.run(_up(config, quiet, prepared, sup))
        except BaseException as exc:
            # The run failed: say what happened (the --json file says it too) before the error.
            print_failure(sup, prepared[0], coord)
            if own_logs and not isinstance(exc, KeyboardInterrupt | asyncio.CancelledError):
                typer.echo(f"node logs kept in {logs}", err=True)
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
    if metrics_file is not None:
        typer.echo(f"metrics: {metrics_file}", err=True)
    if hold_s > 0 and dashboard_port is not None:
        hold_dashboard(state, coord, hold_s)
    if summary.stop_reason == "diverged":
        raise fail(
            f"the run diverged (error {state.error or float('nan'):.3g}): the exchanges cannot "
            "keep up with "
            f"--rate {rate:g} on this machine; try a lower --rate",
            code=1,
        )
    if not summary.reached:
        raise fail(
            f"the error did not reach {until:g} within --timeout {timeout:g} s "
            f"(final error {summary.final_error}); try a longer --timeout or a lower --rate",
            code=1,
        )


def parse_hold(text: str) -> float:
    """Seconds from ``--hold``: a number >= 0, or ``forever`` / ``inf`` (until Ctrl-C).

    Raises
    ------
    ConfigError
        Anything else, quoting it.
    """
    import math

    from gossip.errors import ConfigError

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
    from gossip.errors import ConfigError

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
        from node.faults import parse_faults

        parse_faults(fault)


async def _up(
    config: Any, quiet: bool, prepared: Any = None, supervision: Any = None
) -> tuple[RunSummary, ClusterState]:
    import asyncio
    import signal

    from coordinator._groups import single_error
    from coordinator.broker import redact_broker_url
    from coordinator.launcher import run_up

    # SIGTERM gets the same orderly shutdown as Ctrl-C: cancel, stop every child, exit.
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if main is not None:
        loop.add_signal_handler(signal.SIGTERM, main.cancel)
    holder: dict[str, Any] = {}

    def started(state: ClusterState, broker: Any) -> None:
        holder["state"] = state
        typer.echo(
            f"broker {redact_broker_url(broker.url)} ({broker.kind}); starting "
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
