"""Tables of figures that fit the terminal: a figure is never cut to ``6.016e-…``.

Rich shortens a cell that does not fit with an ellipsis, which turns a measured figure into a
wrong one. Every table here folds such a cell onto a second line instead, and the commands keep
their columns narrow enough that at 80 columns nothing needs to fold.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

__all__ = ["figures_table"]


def figures_table(
    title: str, columns: Sequence[str], *, left: int = 1, show_header: bool = True
) -> Table:
    """A table whose first ``left`` columns are labels (left-aligned) and the rest figures.

    Every column folds a cell that does not fit rather than cutting it with an ellipsis.

    Examples
    --------
    >>> table = figures_table("t_eps", ["graph", "RG", "ARG"])
    >>> table.add_row("line:30", "never", "3367.35")
    """
    table = Table(title=title, show_header=show_header)
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i < left else "right", overflow="fold")
    return table
