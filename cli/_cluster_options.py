"""The options that ``gossip coordinator`` and ``gossip up`` share, as Typer annotations.

Every option can also be set by an environment variable ``GOSSIP_<NAME>`` (``--rate`` is
``GOSSIP_RATE``), so containers can be configured by their environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = [
    "Algorithm",
    "BatchSize",
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
    "Init",
    "JsonOut",
    "Lr",
    "MetricsFile",
    "MetricsPeriod",
    "Momentum",
    "Problem",
    "Rate",
    "RateCom",
    "Split",
    "Timeout",
    "Train",
    "TrainSeed",
    "TrainingRuns",
    "Until",
    "UntilAccuracy",
    "check_hold",
    "env",
    "recipe",
]


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


def recipe(
    train: str,
    algorithm: str,
    data: str,
    split: str,
    rate_com: float,
    lr: float,
    momentum: float,
    batch_size: int,
    init: str,
    seed: int,
) -> Any:
    """Return the :class:`~gossip.train.recipe.Recipe` of ``--train`` options, or ``None``
    without ``--train``.

    Raises
    ------
    ConfigError
        A training option is not valid (named, with the valid values).
    """
    if not train:
        return None
    from continuized.gossip.train.recipe import Recipe

    return Recipe(
        train,
        data or "digits",
        split or "iid:0",
        (algorithm or "a2cid2").strip().lower(),
        rate_com,
        lr,
        momentum,
        batch_size,
        seed,
        init,
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
        help="arg or rg (default arg); with --problem: acd (the default); with --train: "
        "a2cid2 (the default), adpsgd or local.",
        show_default=False,
    ),
]
Rate = Annotated[
    float, typer.Option(envvar=env("rate"), help="Network-wide activations per second.")
]
Until = Annotated[
    float,
    typer.Option(
        envvar=env("until"),
        help="Target error eps (with --train: on the consensus sum_v 1/2 |x_v - xbar|^2).",
    ),
]
UntilAccuracy = Annotated[
    float | None,
    typer.Option(
        envvar=env("until_accuracy"),
        help="With --train: stop once the average model's test accuracy reaches this "
        "(e.g. 0.9), measured exactly at the report grid; eps then does not stop the run.",
    ),
]
TrainingRuns = Annotated[
    int,
    typer.Option(
        envvar=env("training_runs"),
        help="With --train: the simulator's runs of the same settings that draw the "
        "dashboard's band and judge the live accuracy curve (a child process at low priority; "
        "the summary waits for them, 300 s at most). 0: none, as on a Raspberry Pi.",
    ),
]
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
        "npz:PATH or synthetic:SEED. With --train: digits (default), wine, iris, "
        "breast-cancer, npz:PATH, svmlight:PATH, csv:FILE. Each node loads its own shard; the "
        "coordinator loads it only to compute x* or the test accuracy.",
    ),
]
Split = Annotated[
    str,
    typer.Option(
        envvar=env("split"),
        help="With --problem: how the data is cut, iid:SEED (default iid:0) or label:SEED. "
        "With --train: also dirichlet:ALPHA:SEED or shards:K:SEED.",
    ),
]
Train = Annotated[
    str,
    typer.Option(
        envvar=env("train"),
        help="Train a model instead of averaging: softmax, mlp:H, mlp:H1:H2 or module:callable "
        "(--data: digits by default; --algorithm a2cid2, adpsgd or local; t counts gradient "
        "steps per node and --rate is steps per node per second).",
    ),
]
RateCom = Annotated[
    float,
    typer.Option(
        envvar=env("rate_com"),
        help="With --train: communications per node per gradient step (per unit of t).",
    ),
]
Lr = Annotated[
    float, typer.Option(envvar=env("lr"), help="With --train: learning rate of the local step.")
]
Momentum = Annotated[
    float,
    typer.Option(envvar=env("momentum"), help="With --train: heavy-ball momentum (0: plain SGD)."),
]
BatchSize = Annotated[
    int, typer.Option(envvar=env("batch_size"), help="With --train: rows per mini-batch.")
]
Init = Annotated[
    str,
    typer.Option(
        envvar=env("init"),
        help="With --train: common (one initial model for all nodes) or per-node (each its "
        "own: measures consensus, e.g. with --lr 0).",
    ),
]
TrainSeed = Annotated[
    int,
    typer.Option(
        envvar=env("train_seed"),
        help="With --train: seed of the initial models, the test rows and each node's "
        "mini-batch and gradient clock streams (those of gossip train's run 0).",
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
