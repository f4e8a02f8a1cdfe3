"""Turn the project's own errors into one clear line and exit code 2, instead of a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console

from gossip.errors import GossipError

__all__ = ["fail", "reported_errors", "warn"]

_stderr = Console(stderr=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` on stderr and return the Exit to raise."""
    _stderr.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def warn(message: str, label: str = "warning") -> None:
    """Print ``label: message`` on stderr, in bold (red for ``INSECURE``)."""
    colour = "red" if label == "INSECURE" else "yellow"
    _stderr.print(f"[bold {colour}]{label}:[/] {message}", highlight=False, soft_wrap=True)


@contextmanager
def reported_errors() -> Iterator[None]:
    """Report any :class:`GossipError` raised inside as ``error: ...`` and exit with code 2."""
    try:
        yield
    except GossipError as exc:
        raise fail(str(exc)) from None
