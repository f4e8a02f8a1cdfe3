"""How every option is declared: its environment variable is ``GOSSIP_<NAME>``.

An option not given on the command line is read from ``GOSSIP_<NAME>`` (``--rate`` from
``GOSSIP_RATE``, ``--dashboard-port`` from ``GOSSIP_DASHBOARD_PORT``), so that containers can be
configured by their environment.
"""

from __future__ import annotations

from typing import Any

import typer

__all__ = ["env", "option"]


def env(name: str) -> str:
    """The environment variable of option ``name``: ``GOSSIP_<NAME>``.

    Examples
    --------
    >>> env("dashboard-port")
    'GOSSIP_DASHBOARD_PORT'
    """
    return "GOSSIP_" + name.upper().replace("-", "_")


def option(help_text: str, name: str, *flags: str, rich_help_panel: str | None = None) -> Any:
    """A Typer option with ``help_text``, read from ``GOSSIP_<name>`` when not given, listed
    under ``rich_help_panel`` (one of :mod:`cli.options.panels`) in ``--help``."""
    return typer.Option(
        *flags, help=help_text, envvar=f"GOSSIP_{name}", rich_help_panel=rich_help_panel
    )
