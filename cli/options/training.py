"""The training options, declared once: a live ``--train`` run's, and the simulated ``train``'s.

``gossip coordinator`` and ``gossip up`` train with ``--train MODEL`` and the options below it,
which :func:`recipe` turns into one :class:`~gossip.train.recipe.Recipe`; ``gossip train`` and
``gossip reproduce training-figure`` share their local step (``--lr``, ``--momentum``) and
their horizon (``--t-end``). A live run's settings default to ``gossip train``'s: every
command takes its defaults from the ``DEFAULT_*`` constants below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from continuized.cli.options.envvars import env, option
from continuized.cli.options.panels import RUN, TRAINING

if TYPE_CHECKING:
    from continuized.gossip.train.recipe import Recipe

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CONSENSUS_EPS",
    "DEFAULT_INIT",
    "DEFAULT_LR",
    "DEFAULT_MOMENTUM",
    "DEFAULT_RATE_COM",
    "BatchSize",
    "Init",
    "Lr",
    "Momentum",
    "RateCom",
    "SimConsensusEps",
    "SimHorizon",
    "SimLr",
    "SimMomentum",
    "Train",
    "TrainSeed",
    "TrainingRuns",
    "UntilAccuracy",
    "recipe",
]

# The training settings' defaults, one set for the simulated and the live commands.
DEFAULT_LR = 0.1
DEFAULT_MOMENTUM = 0.9
DEFAULT_BATCH_SIZE = 16
DEFAULT_RATE_COM = 1.0
DEFAULT_INIT = "common"
DEFAULT_CONSENSUS_EPS = 1e-3


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
) -> Recipe | None:
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


# A live run's --train options (gossip coordinator, gossip up).
Train = Annotated[
    str,
    typer.Option(
        envvar=env("train"),
        help="Train a model instead of averaging: softmax, mlp:H, mlp:H1:H2 or module:callable "
        "(--data: digits by default; --algorithm a2cid2, adpsgd or local; t counts gradient "
        "steps per node and --rate is steps per node per second).",
        rich_help_panel=TRAINING,
    ),
]
RateCom = Annotated[
    float,
    typer.Option(
        envvar=env("rate_com"),
        help="With --train: communications per node per gradient step (per unit of t).",
        rich_help_panel=TRAINING,
    ),
]
Lr = Annotated[
    float,
    typer.Option(
        envvar=env("lr"),
        help="With --train: learning rate of the local step.",
        rich_help_panel=TRAINING,
    ),
]
Momentum = Annotated[
    float,
    typer.Option(
        envvar=env("momentum"),
        help="With --train: heavy-ball momentum (0: plain SGD).",
        rich_help_panel=TRAINING,
    ),
]
BatchSize = Annotated[
    int,
    typer.Option(
        envvar=env("batch_size"),
        help="With --train: rows per mini-batch.",
        rich_help_panel=TRAINING,
    ),
]
Init = Annotated[
    str,
    typer.Option(
        envvar=env("init"),
        help="With --train: common (one initial model for all nodes) or per-node (each its "
        "own: measures consensus, e.g. with --lr 0).",
        rich_help_panel=TRAINING,
    ),
]
TrainSeed = Annotated[
    int,
    typer.Option(
        envvar=env("train_seed"),
        help="With --train: seed of the initial models, the test rows and each node's "
        "mini-batch and gradient clock streams (those of gossip train's run 0).",
        rich_help_panel=TRAINING,
    ),
]
UntilAccuracy = Annotated[
    float | None,
    typer.Option(
        envvar=env("until_accuracy"),
        help="With --train: stop once the average model's test accuracy reaches this "
        "(e.g. 0.9), measured exactly at the report grid; eps then does not stop the run.",
        rich_help_panel=TRAINING,
    ),
]
TrainingRuns = Annotated[
    int,
    typer.Option(
        envvar=env("training_runs"),
        help="With --train: simulated runs of the same settings, for the dashboard's band "
        "and to judge the live curve (a low-priority child process; the summary waits for "
        "them, 300 s at most). 0: none, as on a Raspberry Pi.",
        rich_help_panel=TRAINING,
    ),
]

# Simulated training (gossip train, gossip reproduce training-figure).
SimLr = Annotated[
    float, option("Learning rate of the local SGD step.", "LR", "--lr", rich_help_panel=TRAINING)
]
SimMomentum = Annotated[
    float,
    option(
        "Heavy-ball momentum of the local step (0: plain SGD).",
        "MOMENTUM",
        "--momentum",
        rich_help_panel=TRAINING,
    ),
]
SimHorizon = Annotated[
    float,
    option(
        "Horizon in t (expected gradient steps per node).", "T_END", "--t-end", rich_help_panel=RUN
    ),
]
SimConsensusEps = Annotated[
    float,
    option(
        "Consensus threshold: the table's 't to cons.' is the first t from which the "
        "consensus distance (1/n) sum_v |x_v - xbar|^2 stays at most this to --t-end "
        "(never: above it at --t-end).",
        "CONSENSUS_EPS",
        "--consensus-eps",
        rich_help_panel=TRAINING,
    ),
]
