"""``gossip graph info``: the graph quantities of a topology."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from continuized.cli._app import graph_app
from continuized.cli._errors import plain_console, reported_errors
from continuized.cli._tables import figures_table
from continuized.cli.options.panels import OUTPUT, RUN

__all__ = ["info"]


@graph_app.command()
def info(
    graph: Annotated[
        str, typer.Argument(help="Topology spec, e.g. line:30, grid:15x15, er:50:0.2:1.")
    ],
    weighted: Annotated[
        bool,
        typer.Option(
            help="Edge probabilities proportional to edge weights (file:...).", rich_help_panel=RUN
        ),
    ] = False,
    method: Annotated[
        str,
        typer.Option(
            help="auto (dense below 512 nodes; from 512 sparse on a sparse graph if SciPy is "
            "installed, else dense up to 1500), dense, or sparse.",
            rich_help_panel=RUN,
        ),
    ] = "auto",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON instead of a table.", rich_help_panel=OUTPUT)
    ] = False,
) -> None:
    """Print n, |E|, mu_gossip, R_max, theta_RG and theta_ARG of a topology."""
    from continuized.gossip.errors import ConfigError
    from continuized.gossip.graph.spectral import graph_quantities
    from continuized.gossip.graph.topology import parse_topology

    with reported_errors():
        if method not in ("auto", "dense", "sparse"):
            raise ConfigError(f"--method must be auto, dense or sparse, got {method!r}")
        topo = parse_topology(graph, weighted=weighted)
        q = graph_quantities(topo, method=method)  # type: ignore[arg-type]
    summary = {"graph": graph, **q.as_dict()}
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    table = figures_table(f"graph {graph}", ["quantity", "value"], show_header=False)
    for key, value in summary.items():
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    plain_console().print(table)
