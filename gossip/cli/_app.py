"""The Typer apps that the command modules register on."""

from __future__ import annotations

import typer

__all__ = ["app", "graph_app", "reproduce_app"]

app = typer.Typer(
    name="gossip",
    help=(
        "Accelerated randomized gossip (continuized Nesterov): simulate it, reproduce the "
        "paper's figures, and run it live as a cluster of node processes."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
graph_app = typer.Typer(help="Inspect topologies and their graph quantities.", no_args_is_help=True)
reproduce_app = typer.Typer(help="Reproduce the paper's figures end to end.", no_args_is_help=True)
app.add_typer(graph_app, name="graph")
app.add_typer(reproduce_app, name="reproduce")
