"""Entry point of the ``gossip`` console script."""

from __future__ import annotations

# Importing the command modules registers their commands on the apps.
import gossip.cli.cluster_cmd
import gossip.cli.optim_cmd  # noqa: F401
from gossip.cli import (
    graph_cmd,  # noqa: F401
    node_cmd,  # noqa: F401
    simulate_cmd,  # noqa: F401
)
from gossip.cli._app import app

__all__ = ["app", "main"]


def main() -> None:
    """Run the ``gossip`` command line."""
    app()


if __name__ == "__main__":
    main()
