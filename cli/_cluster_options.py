"""The options that ``gossip coordinator`` and ``gossip up`` share, as Typer annotations.

Every option can also be set by an environment variable ``GOSSIP_<NAME>`` (``--rate`` is
``GOSSIP_RATE``), so containers can be configured by their environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = [
    "Algorithm",
    "BrokerDeadline",
    "Cluster",
    "DashHost",
    "DashPort",
    "DashRuns",
    "DashToken",
    "Data",
    "DeadAfter",
    "Dim",
    "Graph",
    "JsonOut",
    "MetricsFile",
    "MetricsPeriod",
    "Problem",
    "Rate",
    "Split",
    "Timeout",
    "Until",
    "check_hold",
    "env",
]


def check_hold(text: str, seconds: float, dashboard_port: int | None) -> None:
    """Refuse ``--hold`` (given as ``text``, ``seconds`` long) on a run without a dashboard.

    Raises
    ------
    ConfigError
        ``seconds > 0`` and no ``--dashboard-port``: there would be nothing to hold.
    """
    from gossip.errors import ConfigError

    if seconds > 0 and dashboard_port is None:
        raise ConfigError(
            f"--hold {text} keeps the dashboard up after the run, but there is no dashboard: "
            "add --dashboard-port PORT (e.g. --dashboard-port 8080), or drop --hold"
        )


def env(name: str) -> str:
    """The environment variable of option ``name``: ``GOSSIP_<NAME>``."""
    return "GOSSIP_" + name.upper().replace("-", "_")


# Options shared by both commands, declared once.
Graph = Annotated[
    str,
    typer.Option(envvar=env("graph"), help="Topology, e.g. grid:4x4, line:30, er:50:0.2:1."),
]
Algorithm = Annotated[
    str,
    typer.Option(
        envvar=env("algorithm"),
        help="arg or rg (default arg); with --problem: acd (the default).",
        show_default=False,
    ),
]
Rate = Annotated[
    float, typer.Option(envvar=env("rate"), help="Network-wide activations per second.")
]
Until = Annotated[float, typer.Option(envvar=env("until"), help="Target error eps.")]
Cluster = Annotated[
    str,
    typer.Option(envvar=env("cluster"), help="Cluster name: MQTT topics gossip/<cluster>/."),
]
MetricsFile = Annotated[
    Path | None,
    typer.Option(envvar=env("metrics_file"), help="JSON-lines metrics file of the whole run."),
]
JsonOut = Annotated[
    Path | None, typer.Option("--json", envvar=env("json"), help="Write the run summary here.")
]
MetricsPeriod = Annotated[
    float,
    typer.Option(envvar=env("metrics_period"), help="Seconds between two node state reports."),
]
Dim = Annotated[int, typer.Option(envvar=env("dim"), help="Components of each value.")]
DashPort = Annotated[
    int | None, typer.Option(envvar=env("dashboard_port"), help="Serve the dashboard here.")
]
DashHost = Annotated[
    str, typer.Option(envvar=env("dashboard_host"), help="Dashboard bind address.")
]
DashToken = Annotated[
    str,
    typer.Option(envvar=env("dashboard_token"), help="Bearer token the dashboard requires."),
]
DashRuns = Annotated[
    Path | None,
    typer.Option(
        envvar=env("dashboard_runs_dir"),
        help="Directory where the dashboard keeps finished runs, to overlay later runs of the "
        "same graph (e.g. RG then ARG).",
    ),
]
Problem = Annotated[
    str,
    typer.Option(
        envvar=env("problem"),
        help="Optimize instead of averaging: logistic:LAMBDA, ridge:LAMBDA, quadratic or "
        "module:callable (dual accelerated coordinate descent; --until then applies to "
        "sum_v |x_v - x*|^2).",
    ),
]
Data = Annotated[
    str,
    typer.Option(
        envvar=env("data"),
        help="With --problem: breast-cancer (default), diabetes, svmlight:PATH, csv:DIR, "
        "npz:PATH or synthetic:SEED. Each node loads its own shard; the coordinator loads it "
        "only to compute x* for the check.",
    ),
]
Split = Annotated[
    str,
    typer.Option(
        envvar=env("split"),
        help="With --problem: how the data is cut, iid:SEED (default iid:0) or label:SEED.",
    ),
]
DeadAfter = Annotated[
    float | None,
    typer.Option(
        envvar=env("dead_after"),
        help="Declare a node dead after this many seconds without a report: it leaves the "
        "membership, its neighbours settle their edges with it (default: never).",
    ),
]
BrokerDeadline = Annotated[
    float | None,
    typer.Option(
        envvar=env("broker_deadline"),
        help="Stop the run as failed once the broker has been unreachable this many seconds "
        "in a row (default: wait for it; a broker back sooner costs nothing).",
    ),
]
Timeout = Annotated[
    float | None,
    typer.Option(envvar=env("timeout"), help="Give up this many seconds after t starts."),
]
