"""Entry point of the ``gossip`` console script."""

from __future__ import annotations

# Importing the command modules registers their commands on the apps.
from continuized.cli import (
    cluster_cmd,  # noqa: F401
    graph_cmd,  # noqa: F401
    keys_cmd,  # noqa: F401
    node_cmd,  # noqa: F401
    optim_cmd,  # noqa: F401
    optimize_cmd,  # noqa: F401
    simulate_cmd,  # noqa: F401
    submit_cmd,  # noqa: F401
    train_cmd,  # noqa: F401
    up_cmd,  # noqa: F401
)
from continuized.cli._app import app

__all__ = ["app", "main"]


def main() -> None:
    """Run the ``gossip`` command line."""
    app()


if __name__ == "__main__":
    main()
