"""The runnable blocks of the documentation: a fenced block after a ``<!-- run ... -->`` line.

The convention (docs/contributing.md): ``<!-- run [slow] [solo] [| OLD => NEW]... -->`` on the
line just before a fenced ``bash`` or ``python`` block. ``slow`` marks the block's test slow,
``solo`` runs it alone (a live run that must keep up with its rate: scripts/test's last phase); each
``OLD => NEW`` replaces a text of the block before it runs, to shrink sizes and durations only,
and must match the block (a stale override is an error, not a silent no-op).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

_MARKER = re.compile(r"^<!--\s*run\b(?P<body>.*?)-->\s*$")
_OPEN = re.compile(r"^```(?P<lang>[A-Za-z0-9_-]*)\s*$")
LANGUAGES = ("bash", "python")


@dataclass(frozen=True)
class Block:
    """One runnable block: where it is, its language, and its code as it will run."""

    page: str
    index: int
    line: int
    lang: str
    written: str
    code: str
    slow: bool
    solo: bool = False

    @property
    def name(self) -> str:
        """``page:index``, the block's test id (``tutorial:3``)."""
        return f"{self.page}:{self.index}"


class MarkerError(ValueError):
    """A ``run`` marker the tests cannot honour (no block after it, a stale override ...)."""


def _overrides(parts: list[str], where: str) -> tuple[set[str], list[tuple[str, str]]]:
    flags = set(parts[0].split())
    unknown = sorted(flags - {"slow", "solo"})
    if unknown:
        raise MarkerError(
            f"{where}: unknown flag(s) {unknown} in the run marker; only 'slow' and 'solo'"
        )
    pairs: list[tuple[str, str]] = []
    for part in parts[1:]:
        old, sep, new = part.partition("=>")
        if not sep or not old.strip():
            raise MarkerError(f"{where}: override {part.strip()!r} is not 'OLD => NEW'")
        pairs.append((old.strip(), new.strip()))
    return flags, pairs


def blocks_of(path: Path) -> list[Block]:
    """Every runnable block of one page, in order; raise :class:`MarkerError` on a bad one."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = "README" if path.name == "README.md" else path.stem
    found: list[Block] = []
    i = 0
    while i < len(lines):
        marker = _MARKER.match(lines[i].strip())
        if marker is None:
            i += 1
            continue
        where = f"{path.name}:{i + 1}"
        opening = _OPEN.match(lines[i + 1]) if i + 1 < len(lines) else None
        if opening is None or opening["lang"] not in LANGUAGES:
            raise MarkerError(f"{where}: a run marker must come just before a ```bash or ```python")
        end = i + 2
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise MarkerError(f"{where}: the block after the run marker is never closed")
        written = "\n".join(lines[i + 2 : end]) + "\n"
        flags, pairs = _overrides(marker["body"].split("|"), where)
        code = written
        for old, new in pairs:
            if old not in code:
                raise MarkerError(f"{where}: override {old!r} => {new!r}: no {old!r} in the block")
            code = code.replace(old, new)
        found.append(
            Block(
                page,
                len(found),
                i + 3,
                opening["lang"],
                written,
                code,
                "slow" in flags,
                "solo" in flags,
            )
        )
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    """The runnable blocks of README.md and of every page of docs/."""
    return [block for path in PAGES for block in blocks_of(path)]
