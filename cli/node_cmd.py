"""``gossip node``: run one gossip node process (register, gossip, stop on command)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from continuized.cli._app import app
from continuized.cli._errors import reported_errors
from continuized.cli.options.cluster import MqttCa
from continuized.cli.options.panels import (
    DEPLOYMENT,
    DEPRECATED,
    MEMBERSHIP,
    OBJECTIVE,
    OUTPUT,
    PROCESSES,
    RUN,
    SECURITY,
)
from continuized.coordinator.machine.interfaces import check_zmq_bind

__all__ = ["node"]


@app.command()
def node(
    coordinator: Annotated[
        str,
        typer.Option(
            envvar="GOSSIP_COORDINATOR",
            help="The coordinator, tcp://host:5555.",
            rich_help_panel=DEPLOYMENT,
        ),
    ],
    value: Annotated[
        str | None,
        typer.Option(
            envvar="GOSSIP_VALUE",
            help="This node's own value: 21.5, or 1,2,3 for a vector. Default: the "
            "coordinator's choice.",
            rich_help_panel=OBJECTIVE,
        ),
    ] = None,
    bind: Annotated[
        str,
        typer.Option(
            envvar="GOSSIP_BIND",
            help="Where to serve peers (port 0: any free port).",
            rich_help_panel=DEPLOYMENT,
        ),
    ] = "tcp://0.0.0.0:0",
    advertise: Annotated[
        str | None,
        typer.Option(
            envvar="GOSSIP_ADVERTISE",
            help="Host or IP the peers should use. Default: the interface toward the coordinator.",
            rich_help_panel=DEPLOYMENT,
        ),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option(
            envvar="GOSSIP_HOST",
            help="Shorthand for --bind tcp://HOST:0 --advertise HOST.",
            rich_help_panel=DEPLOYMENT,
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            envvar="GOSSIP_NAME",
            help="Node name (default HOSTNAME-PID); a restarted node with the same name gets "
            "its id back.",
            rich_help_panel=DEPLOYMENT,
        ),
    ] = None,
    fault: Annotated[
        str,
        typer.Option(
            envvar="GOSSIP_FAULT",
            help="Inject faults on sent frames: drop=0.1,dup=0.1,delay=0.1[,delay_ms=20]; "
            "a LAN: latency_ms=1,jitter_ms=0.2 (each way, order kept); a skewed clock: "
            "offset_ms=40, or skew_ms=5 (seeded by --seed, one per process).",
            rich_help_panel=RUN,
        ),
    ] = "",
    retry_timeout: Annotated[
        float,
        typer.Option(
            envvar="GOSSIP_RETRY_TIMEOUT",
            help="First retry timeout of an exchange (s); it doubles up to 2 s.",
            rich_help_panel=RUN,
        ),
    ] = 0.2,
    drain: Annotated[
        float,
        typer.Option(
            envvar="GOSSIP_DRAIN",
            help="On stop: seconds to keep serving normally.",
            rich_help_panel=RUN,
        ),
    ] = 0.5,
    linger: Annotated[
        float,
        typer.Option(
            envvar="GOSSIP_LINGER",
            help="On stop: the longest wait, in seconds, for the neighbours' goodbyes (they "
            "come within a round trip or two; only a dead neighbour makes the node wait this).",
            rich_help_panel=RUN,
        ),
    ] = 10.0,
    register_timeout: Annotated[
        float | None,
        typer.Option(
            envvar="GOSSIP_REGISTER_TIMEOUT",
            help="Give up waiting for the coordinator after this many seconds (default: never).",
            rich_help_panel=RUN,
        ),
    ] = None,
    orphan_after: Annotated[
        float,
        typer.Option(
            envvar="GOSSIP_ORPHAN_AFTER",
            help="Stop by itself after this many seconds without both the broker and the "
            "coordinator: nobody could stop or measure it any more (0: never).",
            rich_help_panel=RUN,
        ),
    ] = 60.0,
    max_in_flight: Annotated[
        int,
        typer.Option(
            envvar="GOSSIP_MAX_IN_FLIGHT",
            help="Back-pressure: skip an edge's tick while this many exchanges started on it "
            "are pending (0: no limit). Skipped ticks slow ARG down, or make it diverge.",
            rich_help_panel=RUN,
        ),
    ] = 0,
    hold_exchanges: Annotated[
        bool | None,
        typer.Option(
            envvar="GOSSIP_HOLD_EXCHANGES",
            hidden=True,
            help="Deprecated, no effect: every jump is exact by design.",
            rich_help_panel=DEPRECATED,
        ),
    ] = None,
    exact: Annotated[
        bool | None,
        typer.Option(
            envvar="GOSSIP_EXACT",
            hidden=True,
            help="Deprecated, no effect: every jump is exact by design.",
            rich_help_panel=DEPRECATED,
        ),
    ] = None,
    correction_tol: Annotated[
        float | None,
        typer.Option(
            envvar="GOSSIP_CORRECTION_TOL",
            hidden=True,
            help="Deprecated, no effect.",
            rich_help_panel=DEPRECATED,
        ),
    ] = None,
    correction_horizon: Annotated[
        float | None,
        typer.Option(
            envvar="GOSSIP_CORRECTION_HORIZON",
            hidden=True,
            help="Deprecated, no effect.",
            rich_help_panel=DEPRECATED,
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            envvar="GOSSIP_SEED", help="Seed of the Poisson clocks and faults.", rich_help_panel=RUN
        ),
    ] = None,
    nodes_per_process: Annotated[
        int,
        typer.Option(
            envvar="GOSSIP_NODES_PER_PROCESS",
            help="Host mode: run this many independent nodes in this process (one event loop, "
            "each with its own sockets and identity), named NAME-0, NAME-1, ...; a fixed "
            "--bind port gives node i port PORT+i.",
            rich_help_panel=PROCESSES,
        ),
    ] = 1,
    data: Annotated[
        str | None,
        typer.Option(
            envvar="GOSSIP_DATA",
            help="Optimization runs: a data source on this machine, replacing the "
            "coordinator's (e.g. csv:/data/shards or svmlight:/data/a9a); this node loads only "
            "its own shard of it.",
            rich_help_panel=OBJECTIVE,
        ),
    ] = None,
    log_level: Annotated[
        str,
        typer.Option(
            envvar="GOSSIP_LOG_LEVEL", help="debug, info, warning or error.", rich_help_panel=OUTPUT
        ),
    ] = "info",
    keys: Annotated[
        list[Path] | None,
        typer.Option(
            envvar="GOSSIP_KEYS",
            help="This node's key directory (gossip keys init: DIR/node-K): CurveZMQ on every "
            "socket; the node is named after its key. Host mode: once per node. Without keys "
            "the node is insecure.",
            rich_help_panel=SECURITY,
        ),
    ] = None,
    keys_pool: Annotated[
        Path | None,
        typer.Option(
            envvar="GOSSIP_KEYS_POOL",
            help="Claim this process's key pair(s) from a pool (gossip keys init --pool: "
            "DIR/pool), one per node, held while it runs; a restart with the same --name gets "
            "the same keys back. For identical replicas (docker compose --scale).",
            rich_help_panel=SECURITY,
        ),
    ] = None,
    mqtt_ca: MqttCa = None,
    leave: Annotated[
        bool,
        typer.Option(
            help="Do not run a node: ask the coordinator (through --broker) to take the running "
            "node --name out of the cluster for good; the others converge to their own mean. "
            "Secured run: with the node's --keys DIR/node-K, over CURVE to --coordinator.",
            rich_help_panel=MEMBERSHIP,
        ),
    ] = False,
    join: Annotated[
        bool,
        typer.Option(
            help="Join a running cluster with --value: the coordinator attaches this node to "
            "random members and the mean moves to include its value.",
            rich_help_panel=MEMBERSHIP,
        ),
    ] = False,
    standing: Annotated[
        bool,
        typer.Option(
            envvar="GOSSIP_STANDING",
            help="Stay up between runs: when a run stops, register again for the next run of "
            "a standing coordinator (gossip coordinator --standing); only SIGTERM or Ctrl-C "
            "ends the process.",
            rich_help_panel=RUN,
        ),
    ] = False,
    broker: Annotated[
        str | None,
        typer.Option(
            envvar="GOSSIP_BROKER",
            help="With --leave: the run's MQTT broker URL.",
            rich_help_panel=DEPLOYMENT,
        ),
    ] = None,
    cluster: Annotated[
        str,
        typer.Option(
            envvar="GOSSIP_CLUSTER",
            help="With --leave: the cluster name.",
            rich_help_panel=DEPLOYMENT,
        ),
    ] = "gossip",
) -> None:
    """Run one node: register with the coordinator, gossip with the neighbours it assigns,
    publish state on MQTT, and stop cleanly on {"cmd": "stop"}, SIGTERM or Ctrl-C."""
    import dataclasses
    import logging

    from continuized.gossip.errors import ConfigError
    from continuized.node.config import NodeConfig, default_node_name, host_configs, parse_value
    from continuized.node.host import run_host_sync
    from continuized.node.transport.faults import parse_faults

    with reported_errors():
        if leave:
            if keys:
                _leave_secure(coordinator, keys, name)
            else:
                _leave(broker, cluster, name, mqtt_ca)
            raise typer.Exit(0)
        if join and value is None:
            raise ConfigError("--join needs --value: a joining node brings its own value")
        level = getattr(logging, log_level.upper(), None)
        if not isinstance(level, int):
            raise ConfigError(
                f"--log-level must be debug, info, warning or error, got {log_level!r}"
            )
        logging.basicConfig(
            level=level, format=f"%(asctime)s {name or 'node'} %(levelname)s %(message)s"
        )
        given = (hold_exchanges, exact, correction_tol, correction_horizon)
        if any(option is not None for option in given):
            # Old scripts must keep working: accepted, ignored, said once.
            typer.echo(
                "warning: --exact, --hold-exchanges, --correction-tol and --correction-horizon "
                "are deprecated and have no effect: every jump is exact by design "
                "(gossip/exchange/exchanger.py)",
                err=True,
            )
        if host is not None:
            bind, advertise = f"tcp://{host}:0", advertise or host
        # Host mode binds PORT, PORT+1, ...: all of them must be free.
        check_zmq_bind("--host" if host else "--bind", bind, max(nodes_per_process, 1))
        explicit_name = name is not None and keys_pool is None
        name = name or default_node_name()
        lease = None
        if keys_pool is not None:
            if keys:
                raise ConfigError("give --keys or --keys-pool, not both")
            from continuized.node.transport.keypool import claim_keys

            claimants = (
                [name]
                if nodes_per_process == 1
                else [f"{name}-{i}" for i in range(nodes_per_process)]
            )
            lease = claim_keys(keys_pool, claimants)
            keys = lease.keys
            logging.getLogger("node").info(
                "CURVE: claimed key(s) %s from the pool %s for %s",
                ", ".join(k.name for k in keys),
                keys_pool,
                name,
            )
        if not keys:
            keys = None
            logging.getLogger("node").warning(
                "no --keys: this node's exchanges are not authenticated (insecure)"
            )
        config = NodeConfig(
            coordinator=coordinator,
            value=None if value is None else parse_value(value),
            bind=bind,
            advertise=advertise,
            faults=parse_faults(fault),
            timeout=retry_timeout,
            max_timeout=max(2.0, retry_timeout),
            drain=drain,
            linger=linger,
            register_timeout=register_timeout,
            seed=seed,
            max_in_flight=max_in_flight or None,
            name=name,
            mqtt_ca=mqtt_ca,
            data=data,
            orphan_after=orphan_after or None,
        )
        try:
            if keys is not None and len(keys) == 1 and explicit_name:
                # One node named explicitly: its name is kept (the coordinator refuses a name
                # its key does not own, and says so); otherwise a node is named after its key.
                configs = [dataclasses.replace(config, keys=keys[0])]
            else:
                configs = host_configs(config, nodes_per_process, keys)
            code = run_host_sync(configs, standing)
        finally:
            if lease is not None:
                lease.release()
    raise typer.Exit(code)


def _leave(broker: str | None, cluster: str, name: str | None, ca: Path | None) -> None:
    """Send the leave request of ``gossip node --leave``."""
    import asyncio

    from continuized.gossip.errors import ConfigError
    from continuized.node.mqtt import request_leave

    if not broker or not name:
        raise ConfigError(
            f"--leave needs --broker (the run's MQTT broker) and --name (the node), got "
            f"broker={broker!r}, name={name!r}"
        )
    asyncio.run(request_leave(broker, cluster, name, None if ca is None else str(ca)))
    typer.echo(f"asked the coordinator of cluster {cluster!r} to remove {name}")


def _leave_secure(coordinator: str, keys: list[Path], name: str | None) -> None:
    """Send the leave request of ``gossip node --leave --keys DIR``, signed by that key."""
    import asyncio

    from continuized.gossip.errors import ConfigError
    from continuized.gossip.files.keys import load_identity
    from continuized.node.registration import request_leave_secure
    from continuized.node.transport.curve import CurveKeys

    if len(keys) != 1:
        raise ConfigError(
            f"--leave takes one --keys directory (the leaving node's), got {len(keys)}"
        )
    identity = load_identity(keys[0])
    name = name or identity.name
    asyncio.run(
        request_leave_secure(coordinator, name, CurveKeys.of(identity), identity.coordinator)
    )
    typer.echo(f"the coordinator at {coordinator} takes {name} out of the cluster")
