"""The options that the batch commands (``simulate``, ``optimize``, ``train``) share.

Each can also be set by an environment variable ``GOSSIP_<NAME>``, as the cluster options can.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["CsvOut", "PlotOut", "ShowProgress", "SummaryOut", "option"]


def option(help_text: str, name: str, *flags: str) -> Any:
    """A Typer option with ``help_text``, read from ``GOSSIP_<name>`` when not given."""
    return typer.Option(*flags, help=help_text, envvar=f"GOSSIP_{name}")


PlotOut = Annotated[
    Path | None, option("Write the figure here (.png, .pdf or .svg).", "PLOT", "--plot")
]
CsvOut = Annotated[Path | None, option("Write the curves here as CSV.", "CSV", "--csv")]
SummaryOut = Annotated[Path | None, option("Write the JSON summary here.", "JSON", "--json")]
ShowProgress = Annotated[
    bool, option("Show a progress bar on stderr.", "PROGRESS", "--progress/--no-progress")
]
