"""``gossip keys``: the key material of a secured cluster (CurveZMQ keys, MQTT passwords)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from continuized.cli._app import app
from continuized.cli._errors import reported_errors
from continuized.cli.options.panels import KEYS, RUN

__all__ = ["init", "keys_app"]

keys_app = typer.Typer(
    help="Key material of a secured cluster: CurveZMQ keys, allow-list, MQTT passwords.",
    no_args_is_help=True,
)
app.add_typer(keys_app, name="keys")


def _node_count(nodes: int | None, graph: str | None) -> int:
    from continuized.gossip.errors import ConfigError

    if nodes is not None:  # before --graph, which may come from the environment
        if nodes < 1:
            raise ConfigError(f"--nodes must be >= 1, got {nodes}")
        return nodes
    if graph is None:
        raise ConfigError("give the number of nodes: --nodes N, or --graph SPEC (grid:4x4)")
    from continuized.gossip.graph.topology import parse_topology

    return int(parse_topology(graph).n)


@keys_app.command()
def init(
    directory: Annotated[
        Path,
        typer.Option("--dir", help="Where to write the keys (created 0700).", rich_help_panel=KEYS),
    ],
    nodes: Annotated[
        int | None,
        typer.Option(help="Number of nodes: node-0 .. node-(N-1).", rich_help_panel=RUN),
    ] = None,
    graph: Annotated[
        str | None,
        typer.Option(
            envvar="GOSSIP_GRAPH", help="Or: as many nodes as this graph has.", rich_help_panel=RUN
        ),
    ] = None,
    pool: Annotated[
        bool,
        typer.Option(
            help="Put the node key pairs in DIR/pool, a pool that `gossip node --keys-pool "
            "DIR/pool` claims from (containers), and mark DIR/*/ready when done.",
            rich_help_panel=KEYS,
        ),
    ] = False,
    if_missing: Annotated[
        bool,
        typer.Option(
            help="Keep the keys already in --dir if they are for as many nodes.",
            rich_help_panel=KEYS,
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option(help="Replace the keys already in --dir.", rich_help_panel=KEYS)
    ] = False,
    spare: Annotated[
        int,
        typer.Option(
            help="Also this many spare node keys, node-N .. node-(N+S-1), in the allow-list and "
            "the broker's ACL: for nodes joining the running cluster (gossip node --join).",
            rich_help_panel=KEYS,
        ),
    ] = 0,
) -> None:
    """Create a cluster's keys: the coordinator's (with the allow-list of the nodes' public
    keys and the MQTT secret), one key pair per node, and mosquitto's passwd and ACL.

    Copy DIR/node-K to node K's machine only (gossip node --keys DIR/node-K) and
    DIR/coordinator to the coordinator's (gossip coordinator --keys DIR/coordinator);
    DIR/mqtt/passwd and DIR/mqtt/acl go to the broker.
    """
    import zmq

    from continuized.coordinator.mqtt.auth import write_mosquitto_auth
    from continuized.gossip.errors import ConfigError
    from continuized.gossip.files.destinations import check_dir_destination
    from continuized.gossip.files.keys import (
        COORDINATOR,
        init_keys,
        load_allow_list,
        load_mqtt_secret,
    )

    with reported_errors():
        if spare < 0:
            raise ConfigError(f"--spare must be >= 0, got {spare}")
        count = _node_count(nodes, graph) + spare
        check_dir_destination("--dir", directory)
        subdirs = (COORDINATOR, "pool", "mqtt") if pool else ()
        if if_missing and (directory / COORDINATOR / "secret.key").exists():
            have = len(load_allow_list(directory / COORDINATOR / "allow.json"))
            if have != count:
                raise ConfigError(
                    f"{directory} holds keys for {have} nodes, not {count}: remove them to "
                    "provision new ones (compose: `docker compose down -v`), or pass --force"
                )
            for sub in subdirs:
                (directory / sub / "ready").touch()
            typer.echo(f"kept the keys for the coordinator and {count} nodes in {directory}/")
            return
        names = [f"node-{k}" for k in range(count)]
        root = directory / "pool" if pool else None
        init_keys(directory, names, zmq.curve_keypair, force=force, node_root=root)
        secret = load_mqtt_secret(directory / COORDINATOR / "mqtt.secret")
        passwd, acl = write_mosquitto_auth(directory / "mqtt", secret, count)
        for sub in subdirs:  # last: what waits for the keys waits for these
            (directory / sub / "ready").touch()
        where = f"{root}/" if root is not None else f"{directory}/node-*"
        spares = f" ({spare} of them spare)" if spare else ""
        typer.echo(
            f"wrote keys for the coordinator and {count} nodes{spares} (node keys in {where}, "
            f"secrets 0600); mosquitto: {passwd}, {acl}"
        )
