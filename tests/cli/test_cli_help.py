"""Every command's ``--help`` at 80 (and 60) columns: whole option names, in named panels.

The option names are taken from each click command's parameters, so an option added later is
checked too.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from continuized.cli._help import unwrap
from continuized.cli.app import app

runner = CliRunner()

_ROW = re.compile(r"^│[ *]*(-[^\s,]+(?:, -[^\s,]+)*)")
"""A panel row's first cell: ``--algorithm, -a``; its line may carry a ``*`` (required)."""
_PANEL = re.compile(r"^╭─ (.+?) ─")


def _commands(command: Any = None, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every runnable command under ``command`` (the whole ``gossip`` app), by its path."""
    command = command if command is not None else typer.main.get_command(app)
    children = getattr(command, "commands", None)
    if not children:
        return {path: command}
    found: dict[tuple[str, ...], Any] = {}
    for name, child in children.items():
        found.update(_commands(child, (*path, name)))
    return found


COMMANDS = _commands()


def _option_names(command: Any) -> list[str]:
    """The names of ``command``'s options, negative forms included (its arguments have none)."""
    return [
        name
        for param in command.params
        if not getattr(param, "hidden", False)
        for name in (*param.opts, *param.secondary_opts)
        if name.startswith("-")
    ]


def _help(path: tuple[str, ...], width: int) -> str:
    result = runner.invoke(
        app, [*path, "--help"], env={"COLUMNS": str(width), "TERM": "dumb", "NO_COLOR": "1"}
    )
    assert result.exit_code == 0, result.output
    return result.output


def _panels(text: str) -> dict[str, str]:
    """Each option name in ``text`` (a ``--help``) with the title of the panel it sits in."""
    panel, where = "", {}
    for line in text.splitlines():
        title = _PANEL.match(line)
        if title:
            panel = title.group(1)
            continue
        row = _ROW.match(line)
        if row:
            for name in row.group(1).split(", "):
                where[name] = panel
    return where


@pytest.mark.parametrize("width", [80, 60])
@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_every_option_name_is_whole_and_no_line_is_too_wide(
    path: tuple[str, ...], width: int
) -> None:
    text = _help(path, width)
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert not too_wide, "\n".join(too_wide)
    assert "…" not in text, text
    listed = _panels(text)
    missing = [name for name in _option_names(COMMANDS[path]) if name not in listed]
    assert not missing, f"{missing} not whole in:\n{text}"


def test_every_option_of_up_sits_in_a_named_panel() -> None:
    text = _help(("up",), 80)
    listed = _panels(text)
    names = _option_names(COMMANDS[("up",)])
    assert names
    assert {name for name in names if listed[name] == "Options"} == set()
    assert [name for name, panel in listed.items() if panel == "Options"] == ["--help"]


def test_an_option_sits_in_the_same_panel_in_every_command() -> None:
    panels: defaultdict[str, set[str | None]] = defaultdict(set)
    for command in COMMANDS.values():
        for param in command.params:
            for name in (*param.opts, *param.secondary_opts):
                panels[name].add(getattr(param, "rich_help_panel", None))
    assert {name: seen for name, seen in panels.items() if len(seen) > 1} == {}


def test_a_wrapped_paragraph_reads_as_one() -> None:
    assert unwrap("checked before\n  any node starts") == "checked before any node starts"
    assert unwrap("\bverbatim\nlines") == "\bverbatim\nlines"
