"""Every option the guide gives a ``gossip`` command exists on that command.

Runnable or not (a Pi, a Swarm), a shell block's ``gossip SUB [SUBSUB] --option`` must match
``gossip SUB [SUBSUB] --help``: an option renamed in the code fails here, not on a reader. So
must the same in inline code in the prose (`` `gossip coordinator --dead-after S` `` in a table
cell). An option quoted alone (`` `--dead-after S` ``) must belong to some ``gossip`` command
and, in the README, to the one quoted last before it: a reader tries it there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
# The changelog's prose is history: an option it quotes may have been renamed since.
PROSE = tuple(page for page in PAGES if page.name != "changelog.md")
_FENCE = re.compile(r"^```bash\s*$(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
# A command runs to the end of its line, a comment, or a shell operator.
_COMMAND = re.compile(r"\bgossip\s+(?P<words>[a-z][a-z-]*(?:\s+[a-z][a-z-]*)?)(?P<args>[^#;&|]*)")
_GROUPS = {"keys", "graph", "reproduce"}  # commands whose first word names a subcommand


# Code in the order of the page: a fenced block (any language) or an inline code span.
_CODE = re.compile(r"^```[^\n]*$.*?^```\s*$|`[^`]+`", re.MULTILINE | re.DOTALL)
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z-]*)")
# Spans that quote another program's options, and where options quoted alone are another's:
# the pages on the benchmarks and scripts, and a few options of the programs named beside them.
_NOT_GOSSIP = re.compile(r"^(python |py-spy |docker |sudo |scripts/|benchmarks/|bench_)")
_OTHER_PAGES = frozenset({"performance.md", "contributing.md"})
_OTHER_OPTIONS = frozenset(
    {
        ("dashboard.md", "--port"),  # the simulated dashboard's (python -m ...synthetic)
        ("deploy.md", "--scale"),  # docker compose's
        ("train.md", "--no-pin"),  # benchmarks/bench_train_wire.py's
    }
)


def _command_words(match: re.Match[str]) -> list[str]:
    words = match["words"].split()
    return words[:2] if words[0] in _GROUPS and len(words) > 1 else words[:1]


def _options_of(line: str, page: str) -> list[tuple[str, str, str]]:
    """``(page, command, option)`` for every ``gossip SUB ... --option`` in ``line``."""
    found = []
    for match in _COMMAND.finditer(line):
        command = _command_words(match)
        rest = " ".join(match["words"].split()[len(command) :]) + " " + match["args"]
        found += [(page, " ".join(command), option) for option in _OPTION.findall(rest)]
    return found


def _inline_spans(text: str) -> list[str]:
    """The prose's inline code spans, each on one line."""
    spans = (m.group(0) for m in _CODE.finditer(text))
    return [span.strip("`").replace("\n", " ") for span in spans if not span.startswith("```")]


def _commands() -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for fence in _FENCE.finditer(text):
            body = fence["body"].replace("\\\n", " ")
            for line in body.splitlines():
                found += _options_of(line, page.name)
        if page in PROSE:
            for span in _inline_spans(text):
                found += _options_of(span, page.name)
    return sorted(set(found))


def _lone_options() -> list[tuple[str, str, str]]:
    """``(page, command, option)`` for each inline span that quotes an option without a command.

    In the README, ``command`` is the one quoted last before it (its paragraphs each show one
    command at work, so that is the one a reader tries it on); elsewhere ``""``: any.
    """
    found = []
    for page in PROSE:
        if page.name in _OTHER_PAGES:
            continue
        last = ""
        for match in _CODE.finditer(page.read_text(encoding="utf-8")):
            code = match.group(0)
            lines = code.replace("\\\n", " ").splitlines()  # a command ends with its line
            named = [m for line in lines for m in _COMMAND.finditer(line)]
            if named:
                last = " ".join(_command_words(named[-1]))
            elif not code.startswith("```") and not _NOT_GOSSIP.match(code.strip("`")):
                owner = last if page.name == "README.md" else ""
                found += [(page.name, owner, option) for option in _OPTION.findall(code)]
    return sorted({f for f in set(found) if (f[0], f[2]) not in _OTHER_OPTIONS})


@cache
def _every_option() -> frozenset[str]:
    """Every option of every ``gossip`` command (Click's view of the Typer app)."""
    import typer

    from continuized.cli.app import app

    options = {"--help"}
    pending: list[Any] = [typer.main.get_command(app)]
    while pending:
        command = pending.pop()
        for param in command.params:
            options.update(param.opts, param.secondary_opts)
        pending.extend(getattr(command, "commands", {}).values())  # a group's subcommands
    return frozenset(options)


@cache
def _help(command: str) -> str:
    env = dict(os.environ, COLUMNS="300", NO_COLOR="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "continuized.cli.app", *command.split(), "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"gossip {command} --help: {done.stderr}"
    return done.stdout


def test_the_guide_quotes_commands() -> None:
    # The extraction works: the guide's best-known commands are found.
    found = {(cmd, opt) for _, cmd, opt in _commands()}
    assert ("up", "--rate") in found
    assert ("keys init", "--nodes") in found


def test_the_prose_is_read_too() -> None:
    # A command quoted in the prose is checked as a block's is (the README's "what survives
    # what" table once named `--dead-after` alone, in a row about `gossip up`, which lacks it).
    assert ("README.md", "coordinator", "--dead-after") in _commands()  # a table cell's
    lone = _lone_options()
    assert ("README.md", "simulate", "--eps") in lone  # after the `gossip simulate` block
    assert ("README.md", "up", "--max-restarts") in lone  # after `gossip up` in the table
    assert ("cluster.md", "", "--dead-after") in lone
    assert "--dead-after" in _every_option()
    assert "--help" in _every_option()


@pytest.mark.parametrize(("page", "command", "option"), _lone_options())
def test_an_option_quoted_alone_is_gossips(page: str, command: str, option: str) -> None:
    if command:
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", _help(command)), (
            f"{page}: `{option}`, quoted after `gossip {command}`, is not in "
            f"`gossip {command} --help`: name the command it belongs to"
        )
    else:
        assert option in _every_option(), (
            f"{page}: `{option}` is an option of no gossip command (`gossip COMMAND --help`)"
        )


@pytest.mark.parametrize(("page", "command", "option"), _commands())
def test_the_option_exists(page: str, command: str, option: str) -> None:
    assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", _help(command)), (
        f"{page}: `gossip {command} {option}`: no such option in `gossip {command} --help`"
    )
