"""Every option a shell block of the guide gives a ``gossip`` command exists on that command.

Runnable or not (a Pi, a Swarm), a block's ``gossip SUB [SUBSUB] --option`` must match
``gossip SUB [SUBSUB] --help``: an option renamed in the code fails here, not on a reader.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
_FENCE = re.compile(r"^```bash\s*$(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
# A command runs to the end of its line, a comment, or a shell operator.
_COMMAND = re.compile(r"\bgossip\s+(?P<words>[a-z][a-z-]*(?:\s+[a-z][a-z-]*)?)(?P<args>[^#;&|]*)")
_GROUPS = {"keys", "graph", "reproduce"}  # commands whose first word names a subcommand


def _commands() -> list[tuple[str, str, str]]:
    found: list[tuple[str, str, str]] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for fence in _FENCE.finditer(text):
            body = fence["body"].replace("\\\n", " ")
            for line in body.splitlines():
                for match in _COMMAND.finditer(line):
                    words = match["words"].split()
                    command = words[:2] if words[0] in _GROUPS and len(words) > 1 else words[:1]
                    rest = " ".join(words[len(command) :]) + " " + match["args"]
                    options = re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest)
                    for option in options:
                        found.append((page.name, " ".join(command), option))
    return sorted(set(found))


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


@pytest.mark.parametrize(("page", "command", "option"), _commands())
def test_the_option_exists(page: str, command: str, option: str) -> None:
    assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", _help(command)), (
        f"{page}: `gossip {command} {option}`: no such option in `gossip {command} --help`"
    )
