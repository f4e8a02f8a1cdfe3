"""The Typer apps that the command modules register on."""

from __future__ import annotations

import typer

from continuized.cli._help import install

__all__ = ["app", "graph_app", "reproduce_app"]

# Whole option names and prose paragraphs in every command's --help, at any width from 60.
install()

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


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"gossip {version('continuized-gossip')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            typer.echo("gossip (not installed)")
        raise typer.Exit()


@app.callback()
def _main(
    show_version: bool = typer.Option(
        False,
        "--version",
        help="Print the installed version and exit.",
        callback=_print_version,
        is_eager=True,
    ),
) -> None:
    """Accelerated randomized gossip: simulate, reproduce, and run live clusters."""
