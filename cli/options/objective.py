"""What a run computes, declared once: the mean of ``--values``, an optimum, or a trained model.

Averaging is the default; ``--problem`` makes a live run optimize and ``--train`` makes it
train. ``--data`` and ``--split`` mean different things in each mode, so their defaults depend
on it: :func:`live_objective` is that rule, the one place ``gossip coordinator`` and
``gossip up`` take it from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from continuized.cli.options.envvars import env, option
from continuized.cli.options.panels import OBJECTIVE
from continuized.cli.options.training import recipe

if TYPE_CHECKING:
    from continuized.gossip.train.recipe import Recipe

__all__ = ["Data", "Dim", "Objective", "Problem", "Split", "Values", "live_objective"]

Values = Annotated[
    str,
    option(
        "Initial values: onehot, onehot:K, gaussian:SEED, uniform:SEED, file:PATH.",
        "VALUES",
        "--values",
        rich_help_panel=OBJECTIVE,
    ),
]
Dim = Annotated[
    int, option("Components of each node's value.", "DIM", "--dim", rich_help_panel=OBJECTIVE)
]
Problem = Annotated[
    str,
    typer.Option(
        envvar=env("problem"),
        help="Optimize instead of averaging: logistic:LAMBDA, ridge:LAMBDA, quadratic or "
        "module:callable (dual accelerated coordinate descent; --until then applies to "
        "sum_v |x_v - x*|^2).",
        rich_help_panel=OBJECTIVE,
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
        rich_help_panel=OBJECTIVE,
    ),
]
Split = Annotated[
    str,
    typer.Option(
        envvar=env("split"),
        help="How the data is cut: iid:SEED (default iid:0), label:SEED, "
        "dirichlet:ALPHA:SEED or shards:K:SEED.",
        rich_help_panel=OBJECTIVE,
    ),
]


@dataclass(frozen=True)
class Objective:
    """A live run's ``--problem``, ``--data`` and ``--split`` with their defaults filled in,
    and its training recipe (``None`` unless ``--train``)."""

    problem: str
    data: str
    split: str
    training: Recipe | None


def live_objective(
    *,
    problem: str,
    data: str,
    split: str,
    train: str,
    algorithm: str,
    rate_com: float,
    lr: float,
    momentum: float,
    batch_size: int,
    init: str,
    train_seed: int,
) -> Objective:
    """The objective of a live run's parsed options, with the defaults of its mode.

    With ``--problem``, data defaults to ``breast-cancer`` and split to ``iid:0``. With
    ``--train``, data and split go into the recipe (``digits``, ``iid:0`` by default) and the
    run's own are empty. Averaging keeps them as given (the nodes may bring their own data).

    Raises
    ------
    ConfigError
        A training option is not valid (named, with the valid values).

    Examples
    --------
    >>> live_objective(problem="ridge:1", data="", split="", train="", algorithm="",
    ...     rate_com=1.0, lr=0.1, momentum=0.0, batch_size=16, init="common", train_seed=0)
    Objective(problem='ridge:1', data='breast-cancer', split='iid:0', training=None)
    """
    # The recipe takes --data and --split as given: its defaults are training's own.
    training = recipe(
        train, algorithm, data, split, rate_com, lr, momentum, batch_size, init, train_seed
    )
    if problem:
        data, split = data or "breast-cancer", split or "iid:0"
    elif train:
        data, split = "", ""
    _require_extras(problem, data, training)
    return Objective(problem, data, split, training)


def _require_extras(problem: str, data: str, training: Recipe | None) -> None:
    """Raise, before any node starts, if the run needs a package of an extra not installed."""
    from continuized.gossip.datasets.sources import require_source
    from continuized.gossip.errors import require_extra

    if problem:
        require_extra("sim", ["scipy"], f"--problem {problem}")
        if problem.strip().lower() != "quadratic":
            require_source(data)
    if training is not None:
        require_source(training.data)
