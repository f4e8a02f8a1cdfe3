"""``gossip keys``: the key material of a secured cluster (CurveZMQ keys, MQTT passwords)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli._app import app
from cli._errors import reported_errors

__all__ = ["init", "keys_app"]

keys_app = typer.Typer(
    help="Key material of a secured cluster: CurveZMQ keys, allow-list, MQTT passwords.",
    no_args_is_help=True,
)
app.add_typer(keys_app, name="keys")


@keys_app.command()
def init(
    directory: Annotated[
        Path, typer.Option("--dir", help="Where to write the keys (created 0700).")
    ],
    nodes: Annotated[int, typer.Option(help="Number of nodes: node-0 .. node-(N-1).")],
    force: Annotated[bool, typer.Option(help="Replace the keys already in --dir.")] = False,
) -> None:
    """Create a cluster's keys: the coordinator's (with the allow-list of the nodes' public
    keys and the MQTT secret), one key pair per node, and mosquitto's passwd and ACL.

    Copy DIR/node-K to node K's machine only (gossip node --keys DIR/node-K) and
    DIR/coordinator to the coordinator's (gossip coordinator --keys DIR/coordinator);
    DIR/mqtt/passwd and DIR/mqtt/acl go to the broker.
    """
    import zmq

    from coordinator.mqtt_auth import write_mosquitto_auth
    from gossip.errors import ConfigError
    from gossip.keys import COORDINATOR, init_keys, load_mqtt_secret

    with reported_errors():
        if nodes < 1:
            raise ConfigError(f"--nodes must be >= 1, got {nodes}")
        names = [f"node-{k}" for k in range(nodes)]
        init_keys(directory, names, zmq.curve_keypair, force=force)
        secret = load_mqtt_secret(directory / COORDINATOR / "mqtt.secret")
        passwd, acl = write_mosquitto_auth(directory / "mqtt", secret, nodes)
        typer.echo(
            f"wrote keys for the coordinator and {nodes} nodes in {directory}/ "
            f"(secrets 0600); mosquitto: {passwd}, {acl}"
        )
