"""How ``--help`` lays out a command's options: whole option names at any width from 60 columns.

Typer prints each panel as one table with a column for every kind of name (long, short,
negative long, negative short), the type and the help, and lets rich shrink every column alike
when they do not fit: at 80 columns ``--restart-on-new-address`` came out as
``--restart-on-new-a…``. :func:`install` replaces that table with three columns: the names (a
switch's negative form on a second line; never wrapped or cut), the type, and the help, which
alone gives way. It also joins the lines of a help paragraph, so that a docstring wrapped for the
source reads as prose at any width. Typer's own parts render the cells (types, defaults,
environment variables), so the help reads as before, only narrower.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["install", "unwrap"]


def unwrap(paragraph: str) -> str:
    r"""``paragraph`` with its line breaks made spaces, unless it starts with ``\b`` (verbatim).

    Examples
    --------
    >>> unwrap("Exit 1: the run\nfailed.")
    'Exit 1: the run failed.'
    """
    if paragraph.startswith("\b"):
        return paragraph
    return " ".join(line.strip() for line in paragraph.splitlines())


def _names(param: Any) -> Any:
    """The names cell: ``--algorithm, -a``; a switch's negative names on a line below."""
    from rich.text import Text
    from typer import rich_utils
    from typer.core import TyperArgument

    if isinstance(param, TyperArgument):
        label = param.metavar if param.metavar is not None else (param.name or "")
        return Text(label, style=rich_utils.STYLE_OPTION)
    longs = [name for name in param.opts if name.startswith("--")]
    shorts = [name for name in param.opts if not name.startswith("--")]
    cell = rich_utils.highlighter(Text(", ".join(longs + shorts)))
    if param.secondary_opts:
        cell.append("\n")
        cell.append_text(rich_utils.negative_highlighter(Text(", ".join(param.secondary_opts))))
    return cell


def _type(param: Any, ctx: Any) -> Any:
    """The type cell: ``FLOAT`` and its range, empty for a switch (it takes no value)."""
    from rich.text import Text
    from typer import rich_utils
    from typer.core import TyperArgument, TyperOption

    cell = Text(style=rich_utils.STYLE_TYPES)
    if isinstance(param, TyperArgument):
        metavar = param.type.get_metavar(param=param, ctx=ctx) or f"<{param.type.name}>"
    else:
        metavar = param.make_metavar(ctx=ctx)
    if metavar and not getattr(param, "is_flag", False) and "bool" not in metavar.lower():
        cell.append(metavar)
    kind = param.type
    if (
        isinstance(param, TyperOption)
        and hasattr(kind, "_describe_range")
        and not (param.count and kind.min == 0 and kind.max is None)
    ):
        range_text = kind._describe_range()
        if range_text:
            cell.append(rich_utils.RANGE_STRING.format(range_text))
    return rich_utils.types_highlighter(cell)


def _help(param: Any, ctx: Any, markup_mode: Any) -> Any:
    """The help cell, typer's; a word too long for a narrow column folds instead of being cut."""
    from rich.text import Text
    from typer import rich_utils

    cell = rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode)
    for part in getattr(cell, "renderables", ()):
        if isinstance(part, Text):
            part.overflow = "fold"
    return cell


def _options_panel(
    *, name: str, params: Sequence[Any], ctx: Any, markup_mode: Any, console: Any
) -> None:
    """Print the panel ``name`` of ``params``; drop-in for typer's ``_print_options_panel``."""
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text
    from typer import rich_utils

    if not params:
        return
    required = any(param.required for param in params)
    table = Table.grid(padding=(0, 1), expand=True)
    if required:
        table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)  # the names: never cut
    table.add_column(no_wrap=True)
    table.add_column(ratio=1)  # the help takes what is left, and wraps
    for param in params:
        row = [
            _names(param),
            _type(param, ctx),
            _help(param, ctx, markup_mode),
        ]
        if required:
            mark = rich_utils.REQUIRED_SHORT_STRING if param.required else ""
            row.insert(0, Text(mark, style=rich_utils.STYLE_REQUIRED_SHORT))
        table.add_row(*row)
    console.print(
        Panel(
            table,
            border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER,
            title=name,
            title_align=rich_utils.ALIGN_OPTIONS_PANEL,
        )
    )


def install() -> None:
    """Make typer's rich help use :func:`_options_panel` and unwrap help paragraphs.

    Leaves typer's help as it is if its rich formatter lacks the parts this replaces (another
    typer version): the help then still works, only with typer's own layout.
    """
    from typer import rich_utils

    parts = ("_print_options_panel", "_get_parameter_help", "_fix_linebreaks", "_make_command_help")
    if not all(hasattr(rich_utils, part) for part in parts):
        return
    rich_utils._print_options_panel = _options_panel
    join: Callable[..., str] = rich_utils._fix_linebreaks
    command_help: Callable[..., Any] = rich_utils._make_command_help

    def fix_linebreaks(paragraphs: list[str], markup_mode: Any) -> str:
        return join([unwrap(paragraph) for paragraph in paragraphs], markup_mode)

    def make_command_help(*, help_text: str, markup_mode: Any) -> Any:
        import inspect

        first, _, rest = inspect.cleandoc(help_text).partition("\n\n")
        return command_help(help_text=unwrap(first) + "\n\n" + rest, markup_mode=markup_mode)

    rich_utils._fix_linebreaks = fix_linebreaks
    rich_utils._make_command_help = make_command_help
