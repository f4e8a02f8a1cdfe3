"""The options of a live cluster run (``gossip coordinator``, ``gossip up``), declared once.

The topology, the algorithm, the rate and the target, where the metrics go, when to give up, and
the dashboard; with :func:`check_hold`, the rule that ``--hold`` needs a dashboard. What the run
computes (``--values``, ``--problem``, ``--train``) is in :mod:`cli.options.objective`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from continuized.cli.options.envvars import env
from continuized.cli.options.panels import DASHBOARD, DEPLOYMENT, MEMBERSHIP, OUTPUT, RUN, SECURITY

__all__ = [
    "Algorithm",
    "BrokerDeadline",
    "Cluster",
    "DashHost",
    "DashPort",
    "DashRuns",
    "DashToken",
    "DeadAfter",
    "Graph",
    "MetricsFile",
    "MetricsPeriod",
    "MqttCa",
    "Rate",
    "Timeout",
    "Until",
    "UpTimeout",
    "check_dashboard",
    "check_hold",
]


def check_dashboard(dashboard_port: int | None) -> None:
    """Refuse ``--dashboard-port`` where the ``dashboard`` extra (its server) is not installed.

    Raises
    ------
    MissingExtraError
        One line naming the pip command, before any process starts.
    """
    from continuized.gossip.errors import require_extra

    if dashboard_port is not None:
        require_extra("dashboard", ["aiohttp", "prometheus_client"], "--dashboard-port")


def check_hold(text: str, seconds: float, dashboard_port: int | None) -> None:
    """Refuse ``--hold`` (given as ``text``, ``seconds`` long) on a run without a dashboard.

    Raises
    ------
    ConfigError
        ``seconds > 0`` and no ``--dashboard-port``: there would be nothing to hold.
    """
    from continuized.gossip.errors import ConfigError

    if seconds > 0 and dashboard_port is None:
        raise ConfigError(
            f"--hold {text} keeps the dashboard up after the run, but there is no dashboard: "
            "add --dashboard-port PORT (e.g. --dashboard-port 8080), or drop --hold"
        )


Graph = Annotated[
    str,
    typer.Option(
        envvar=env("graph"),
        help="Topology, e.g. grid:4x4, line:30, er:50:0.2:1.",
        rich_help_panel=RUN,
    ),
]
Algorithm = Annotated[
    str,
    typer.Option(
        envvar=env("algorithm"),
        help="arg or rg (default arg); with --problem: acd (the default); with --train: "
        "a2cid2 (the default), adpsgd or local.",
        show_default=False,
        rich_help_panel=RUN,
    ),
]
Rate = Annotated[
    float,
    typer.Option(
        envvar=env("rate"), help="Network-wide activations per second.", rich_help_panel=RUN
    ),
]
Until = Annotated[
    float,
    typer.Option(
        envvar=env("until"),
        help="Target error eps (with --train: on the consensus sum_v 1/2 |x_v - xbar|^2).",
        rich_help_panel=RUN,
    ),
]
Cluster = Annotated[
    str,
    typer.Option(
        envvar=env("cluster"),
        help="Cluster name: MQTT topics gossip/<cluster>/.",
        rich_help_panel=DEPLOYMENT,
    ),
]
MetricsFile = Annotated[
    Path | None,
    typer.Option(
        envvar=env("metrics_file"),
        help="JSON-lines metrics file of the whole run.",
        rich_help_panel=OUTPUT,
    ),
]
MetricsPeriod = Annotated[
    float,
    typer.Option(
        envvar=env("metrics_period"),
        help="Seconds between two node state reports.",
        rich_help_panel=OUTPUT,
    ),
]
MqttCa = Annotated[
    Path | None,
    typer.Option(
        envvar=env("mqtt_ca"), help="CA (PEM) of an mqtts:// broker.", rich_help_panel=SECURITY
    ),
]

# gossip up's --timeout is the same option, but always set: a local run must end.
_TIMEOUT_HELP = "Give up this many seconds after t starts."
Timeout = Annotated[
    float | None, typer.Option(envvar=env("timeout"), help=_TIMEOUT_HELP, rich_help_panel=RUN)
]
UpTimeout = Annotated[
    float, typer.Option(envvar=env("timeout"), help=_TIMEOUT_HELP, rich_help_panel=RUN)
]

DeadAfter = Annotated[
    float | None,
    typer.Option(
        envvar=env("dead_after"),
        help="Declare a node dead after this many seconds without a report: it leaves the "
        "membership, its neighbours settle their edges with it (default: never).",
        rich_help_panel=MEMBERSHIP,
    ),
]
BrokerDeadline = Annotated[
    float | None,
    typer.Option(
        envvar=env("broker_deadline"),
        help="Stop the run as failed once the broker has been unreachable this many seconds "
        "in a row (default: wait for it; a broker back sooner costs nothing).",
        rich_help_panel=RUN,
    ),
]

# The dashboard: where it is served, who may read it, where finished runs are kept.
DashPort = Annotated[
    int | None,
    typer.Option(
        envvar=env("dashboard_port"), help="Serve the dashboard here.", rich_help_panel=DASHBOARD
    ),
]
DashHost = Annotated[
    str,
    typer.Option(
        envvar=env("dashboard_host"), help="Dashboard bind address.", rich_help_panel=DASHBOARD
    ),
]
DashToken = Annotated[
    str,
    typer.Option(
        envvar=env("dashboard_token"),
        help="Bearer token the dashboard requires.",
        rich_help_panel=DASHBOARD,
    ),
]
DashRuns = Annotated[
    Path | None,
    typer.Option(
        envvar=env("dashboard_runs_dir"),
        help="Directory where the dashboard keeps finished runs, to overlay later runs of the "
        "same graph (e.g. RG then ARG).",
        rich_help_panel=DASHBOARD,
    ),
]
