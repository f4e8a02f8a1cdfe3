"""How many runs, on which grid, from which seed: the run options of the batch commands.

``simulate``, ``optimize``, ``train`` and the ``reproduce`` commands draw independent runs on a
time grid; their ``--runs``, ``--grid-points``, ``--seed``, ``--eps`` and ``--workers`` are
declared here, with the checks of their parsed values (:func:`check_count`,
:func:`check_positive`), so that every command refuses a bad value with the same message.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from continuized.cli.options.envvars import option
from continuized.cli.options.panels import RUN

__all__ = [
    "Eps",
    "GridPoints",
    "PanelGridPoints",
    "PanelRuns",
    "Runs",
    "Seed",
    "Workers",
    "check_count",
    "check_positive",
    "seed_option",
]


def seed_option(help_text: str) -> Any:
    """``--seed``, with ``help_text`` saying what else than the runs the seed draws."""
    return option(help_text, "SEED", "--seed", rich_help_panel=RUN)


Runs = Annotated[
    int, option("Independent runs per algorithm.", "RUNS", "--runs", rich_help_panel=RUN)
]
PanelRuns = Annotated[
    int, option("Runs per panel and algorithm.", "RUNS", "--runs", rich_help_panel=RUN)
]
GridPoints = Annotated[
    int,
    option(
        "Points of the time grid, evenly spaced on [0, t-end].",
        "GRID_POINTS",
        "--grid-points",
        rich_help_panel=RUN,
    ),
]
PanelGridPoints = Annotated[
    int,
    option(
        "Points of the time grid of each panel.",
        "GRID_POINTS",
        "--grid-points",
        rich_help_panel=RUN,
    ),
]
Seed = Annotated[int, seed_option("Seed of the runs.")]
Eps = Annotated[
    float,
    option(
        "Target error for t_eps (first grid time with median error <= eps).",
        "EPS",
        "--eps",
        rich_help_panel=RUN,
    ),
]
Workers = Annotated[
    int | None,
    option(
        "Threads of the compiled kernel, worker processes of the numpy engine (default: one per "
        "CPU for large jobs).",
        "WORKERS",
        "--workers",
        rich_help_panel=RUN,
    ),
]


def check_count(flag: str, value: int, minimum: int) -> None:
    """Refuse an integer option ``flag`` whose ``value`` is below ``minimum``.

    Raises
    ------
    ConfigError
        ``value < minimum``, e.g. ``--runs must be an integer >= 1, got 0``.
    """
    from continuized.gossip.errors import ConfigError

    if value < minimum:
        raise ConfigError(f"{flag} must be an integer >= {minimum}, got {value}")


def check_positive(flag: str, value: float) -> None:
    """Refuse an option ``flag`` (``--t-end``, ``--eps``) whose ``value`` is not finite and > 0.

    Raises
    ------
    ConfigError
        ``value`` is <= 0, infinite or NaN, e.g. ``--eps must be a finite number > 0, got 0.0``.
    """
    from continuized.gossip.errors import ConfigError

    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{flag} must be a finite number > 0, got {value!r}")
