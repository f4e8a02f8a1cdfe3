"""Where a command writes what it found: the output options, declared once.

``--plot``, ``--csv``, ``--json`` and ``--progress`` of the batch commands (``simulate``,
``optimize``, ``train``), ``--json`` of a live run (``coordinator``, ``up``), and ``--out``, the
directory of the ``reproduce`` commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from continuized.cli.options.envvars import env, option
from continuized.cli.options.panels import OUTPUT

__all__ = ["CsvOut", "FigureDir", "JsonOut", "PlotOut", "ShowProgress", "SummaryOut"]

PlotOut = Annotated[
    Path | None,
    option("Write the figure here (.png, .pdf or .svg).", "PLOT", "--plot", rich_help_panel=OUTPUT),
]
CsvOut = Annotated[
    Path | None, option("Write the curves here as CSV.", "CSV", "--csv", rich_help_panel=OUTPUT)
]
SummaryOut = Annotated[
    Path | None, option("Write the JSON summary here.", "JSON", "--json", rich_help_panel=OUTPUT)
]
ShowProgress = Annotated[
    bool,
    option(
        "Show a progress bar on stderr.",
        "PROGRESS",
        "--progress/--no-progress",
        rich_help_panel=OUTPUT,
    ),
]
JsonOut = Annotated[
    Path | None,
    typer.Option(
        "--json", envvar=env("json"), help="Write the run summary here.", rich_help_panel=OUTPUT
    ),
]
FigureDir = Annotated[
    Path, option("Directory for the PNGs, CSVs and JSON.", "OUT", "--out", rich_help_panel=OUTPUT)
]
