"""``gossip submit``: send a run to a standing coordinator and wait for its summary.

Options left out keep the standing coordinator's own settings (its command line). Every
option can also be set by an environment variable ``GOSSIP_<NAME>``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from continuized.cli._app import app
from continuized.cli._errors import fail, plain_console, reported_errors
from continuized.cli._saving import Saving
from continuized.cli._tables import figures_table
from continuized.cli.options.cluster import MqttCa
from continuized.cli.options.envvars import env
from continuized.cli.options.panels import DEPLOYMENT, OBJECTIVE, OUTPUT, RUN, SECURITY

__all__ = ["submit"]


@app.command()
def submit(
    broker: Annotated[
        str,
        typer.Option(
            envvar=env("broker"),
            help="The standing coordinator's broker, mqtt://host:1883 (secured: with "
            "--keys, or mqtt://operator:PASSWORD@host:1883).",
            rich_help_panel=DEPLOYMENT,
        ),
    ],
    graph: Annotated[
        str | None,
        typer.Option(
            help="Another topology with the same node count, e.g. cycle:9.", rich_help_panel=RUN
        ),
    ] = None,
    algorithm: Annotated[
        str | None, typer.Option(help="arg or rg; with --problem: acd.", rich_help_panel=RUN)
    ] = None,
    rate: Annotated[
        float | None, typer.Option(help="Network-wide activations per second.", rich_help_panel=RUN)
    ] = None,
    until: Annotated[
        float | None, typer.Option(help="Target error eps.", rich_help_panel=RUN)
    ] = None,
    values: Annotated[
        str | None,
        typer.Option(
            help="The run's initial values: onehot, gaussian:SEED, uniform:SEED, ...",
            rich_help_panel=OBJECTIVE,
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(help="Give up the run this many seconds after t starts.", rich_help_panel=RUN),
    ] = None,
    problem: Annotated[
        str | None,
        typer.Option(
            help="Optimize instead of averaging, e.g. logistic:0.1.", rich_help_panel=OBJECTIVE
        ),
    ] = None,
    data: Annotated[
        str | None, typer.Option(help="With --problem: the data source.", rich_help_panel=OBJECTIVE)
    ] = None,
    split: Annotated[
        str | None,
        typer.Option(
            help="With --problem: iid:SEED, label:SEED, dirichlet:ALPHA:SEED or shards:K:SEED.",
            rich_help_panel=OBJECTIVE,
        ),
    ] = None,
    cluster: Annotated[
        str,
        typer.Option(
            envvar=env("cluster"),
            help="The standing coordinator's --cluster.",
            rich_help_panel=DEPLOYMENT,
        ),
    ] = "gossip",
    keys: Annotated[
        Path | None,
        typer.Option(
            envvar=env("keys"),
            help="The coordinator's key directory (DIR/coordinator of gossip keys init): "
            "submit as the broker's operator account.",
            rich_help_panel=SECURITY,
        ),
    ] = None,
    mqtt_ca: MqttCa = None,
    wait: Annotated[
        float,
        typer.Option(
            help="Seconds to wait for the summary (the queue, the run and its stop).",
            rich_help_panel=RUN,
        ),
    ] = 600.0,
    standing_wait: Annotated[
        float,
        typer.Option(
            envvar=env("standing_wait"),
            help="Seconds to wait for a standing coordinator to say it listens on the broker "
            "(its retained presence) before giving up, the run not sent.",
            rich_help_panel=DEPLOYMENT,
        ),
    ] = 5.0,
    json_out: Annotated[
        Path | None,
        typer.Option(
            "--json",
            help="Write the run's summary (as gossip coordinator --json).",
            rich_help_panel=OUTPUT,
        ),
    ] = None,
) -> None:
    """Submit a run to a standing coordinator (gossip coordinator --standing) and print its
    summary; exit 1 if it did not reach eps, 2 if it was refused or failed, or if no standing
    coordinator listens on the broker (said within --standing-wait seconds), 3 if --json could
    not be written (the record is then kept in a fallback file). The values are checked here
    first, as gossip coordinator checks them."""
    import asyncio

    from continuized.coordinator.run.config import check_positive
    from continuized.coordinator.run.standing import check_submission, submit_run
    from continuized.gossip.files.destinations import check_file_destination
    from continuized.gossip.wire.pubsub import redact_broker

    changes: dict[str, Any] = {
        name: value
        for name, value in (
            ("graph", graph),
            ("algorithm", algorithm),
            ("rate", rate),
            ("until", until),
            ("values", values),
            ("timeout", timeout),
            ("problem", problem),
            ("data", data),
            ("split", split),
        )
        if value is not None
    }
    with reported_errors():
        check_submission(changes)
        check_positive("--wait", wait)
        check_positive("--standing-wait", standing_wait)
        if json_out is not None:
            check_file_destination("--json", json_out)
        url = _operator_url(broker, keys)

        def queued(position: int) -> None:
            ahead = f" ({position - 1} run(s) ahead)" if position > 1 else ""
            typer.echo(f"submit: queued on {redact_broker(url)}{ahead}", err=True)

        answer = asyncio.run(
            submit_run(
                url,
                cluster,
                changes,
                wait=wait,
                standing_wait=standing_wait,
                ca=None if mqtt_ca is None else str(mqtt_ca),
                on_queued=queued,
            )
        )
    if answer.get("state") != "done":
        raise fail(f"the standing coordinator {answer.get('state')} the run: {answer.get('error')}")
    record = answer.get("record")
    if not isinstance(record, dict):
        raise fail("the run ended without a summary (its coordinator had no broker)")
    saving = Saving("submit")
    saving.write("--json", json_out, lambda p: p.write_text(json.dumps(record, indent=2) + "\n"))
    _print_record(record)
    lost = saving.report(record)
    if not record.get("reached"):  # the run's own failure decides the exit code
        raise fail(f"the error did not reach {record.get('eps')}", 1)
    if lost is not None:
        raise lost


def _operator_url(broker: str, keys: Path | None) -> str:
    """``broker`` with the operator's credentials, derived from the MQTT secret in ``keys``."""
    if keys is None:
        return broker
    from urllib.parse import urlsplit

    from continuized.coordinator.membership.security import with_credentials
    from continuized.gossip.errors import ConfigError
    from continuized.gossip.files.keys import load_mqtt_secret
    from continuized.gossip.wire.access import OPERATOR, mqtt_password

    if urlsplit(broker).username:
        raise ConfigError(
            f"give --keys or credentials in --broker {broker.split('@')[-1]!r}, not both"
        )
    secret = load_mqtt_secret(keys / "mqtt.secret")
    return with_credentials(broker, OPERATOR, mqtt_password(secret, OPERATOR))


def _print_record(record: dict[str, Any]) -> None:
    """The run's headline figures, as ``gossip coordinator`` prints them (unknown if absent)."""

    def num(key: str, fmt: str) -> str:
        value = record.get(key)
        return "unknown" if not isinstance(value, int | float) else format(value, fmt)

    table = figures_table(
        f"{record.get('algorithm')} on {record.get('graph')}: run {record.get('run_id')}",
        ["quantity", "value"],
    )
    rows = [
        ("reached eps", f"{record.get('reached')} (eps {record.get('eps')})"),
        ("stop reason", str(record.get("stop_reason"))),
        ("t to eps (exact curve)", num("t_eps", ".1f")),
        ("wall time to eps (s)", num("wall_s", ".2f")),
        ("activations", str(record.get("activations"))),
        (
            "rate achieved / asked (1/s)",
            f"{num('rate_achieved', '.0f')} / {num('rate_asked', 'g')}",
        ),
        ("final error", num("final_error", ".3e")),
        ("mass drift (relative)", num("mass_drift_rel", ".2e")),
        ("round trip p50 / p99 (ms)", f"{num('rtt_p50_ms', '.2f')} / {num('rtt_p99_ms', '.2f')}"),
        ("exact curve points", str(record.get("exact_points"))),
    ]
    for key, value in rows:
        table.add_row(key, value)
    plain_console().print(table)
