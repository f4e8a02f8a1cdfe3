"""Turn the project's own errors into one clear line and exit code 2, instead of a traceback.

Error messages quote user data (a file's bad line, a topology spec, a path), so they are printed
verbatim: never through rich markup (``[bold]`` would vanish) or emoji codes (``:x:`` would
become a cross). :func:`plain_console` is the console for any output that carries user data.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.text import Text

from continuized.gossip.errors import GossipError

__all__ = ["fail", "plain_console", "reported_errors", "warn"]


def plain_console(stderr: bool = False) -> Console:
    """A console that prints strings verbatim: no markup, no emoji codes, no highlighting."""
    return Console(stderr=stderr, markup=False, emoji=False, highlight=False)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` on stderr (the message verbatim) and return the Exit to raise."""
    line = Text.assemble(("error:", "bold red"), " ", message)
    plain_console(stderr=True).print(line, soft_wrap=True)
    return typer.Exit(code)


def warn(message: str, label: str = "warning") -> None:
    """Print ``label: message`` on stderr (the message verbatim; red for ``INSECURE``)."""
    colour = "bold red" if label == "INSECURE" else "bold yellow"
    line = Text.assemble((f"{label}:", colour), " ", message)
    plain_console(stderr=True).print(line, soft_wrap=True)


@contextmanager
def reported_errors() -> Iterator[None]:
    """Report any :class:`GossipError` raised inside as ``error: ...`` and exit with code 2."""
    try:
        yield
    except GossipError as exc:
        raise fail(str(exc)) from None
