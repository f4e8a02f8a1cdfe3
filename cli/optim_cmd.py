"""``gossip reproduce optim-figure``: the paper's optimization figures (comparison, noise)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from continuized.cli._app import reproduce_app
from continuized.cli._errors import reported_errors
from continuized.cli._tables import figures_table
from continuized.cli.options.output import FigureDir
from continuized.cli.options.panels import RUN

__all__ = ["optim_figure"]


@reproduce_app.command("optim-figure")
def optim_figure(
    out: FigureDir = Path("figures"),
    runs: Annotated[
        int,
        typer.Option(
            help="Runs of continuized Nesterov in the comparison figure.",
            envvar="GOSSIP_RUNS",
            min=1,
            rich_help_panel=RUN,
        ),
    ] = 1000,
    noise_runs: Annotated[
        int,
        typer.Option(
            help="Runs of each method in the additive-noise figure.",
            envvar="GOSSIP_NOISE_RUNS",
            min=1,
            rich_help_panel=RUN,
        ),
    ] = 100,
    seed: Annotated[
        int,
        typer.Option(
            help="Seed of all randomness.", envvar="GOSSIP_SEED", min=0, rich_help_panel=RUN
        ),
    ] = 0,
) -> None:
    """Reproduce the comparison of GD, Nesterov and continuized Nesterov, and the noise figure.

    Writes optim_comparison.png, optim_noise.png, one CSV per panel and optim_figures.json
    (with measured against theoretical convergence slopes) into --out.
    """
    from rich.console import Console

    from continuized.gossip.errors import require_extra

    with reported_errors():  # before the import of the figures' module, which needs SciPy
        require_extra("sim", ["scipy"], "gossip reproduce optim-figure")
        require_extra("plot", ["matplotlib"], "gossip reproduce optim-figure")
    from continuized.gossip.files.destinations import check_dir_destination
    from continuized.gossip.optim.figures import write_optim_figures

    with reported_errors():
        check_dir_destination("--out", out)
        summary = write_optim_figures(out, runs=runs, noise_runs=noise_runs, seed=seed)
    table = figures_table(
        "convergence slopes (comparison figure)",
        ["panel", "method", "measured", "theory"],
        left=2,
    )
    for panel, methods in summary["slopes"]["comparison"].items():
        for method, slope in methods.items():
            table.add_row(panel, method, f"{slope['measured']:.4g}", f"{slope['theory']:.4g}")
    console = Console()
    console.print(table)
    console.print(
        f"wrote {len(summary['files'])} files to {out} in {summary['seconds']['total']:.1f} s",
        highlight=False,
    )
