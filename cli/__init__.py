"""The ``gossip`` command line: one entry point, one module per group of subcommands.

Each command module registers its commands on the Typer apps of :mod:`cli._app` and keeps
its heavy imports (matplotlib, zmq, aiohttp) inside the command functions, so that
``gossip --help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from continuized.cli.app import main

# Only ``main``: ``cli.app`` is the entry module's own name (the Typer app is ``cli.app.app``).
__all__ = ["main"]


def __getattr__(name: str) -> Any:
    """``cli.main``, imported on first use (PEP 562).

    Importing :mod:`cli.app` here eagerly would make ``python -m continuized.cli.app`` warn
    that the module was already imported by its package.
    """
    if name in __all__:
        import continuized.cli.app as entry

        return getattr(entry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
