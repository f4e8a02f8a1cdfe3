"""Writing a finished command's files: each one written, or the result kept and the loss said.

Every output path was checked before the work started
(:mod:`gossip.files.destinations`); a write that fails at the end anyway (a full disk, a
directory removed during the run) does not lose the result: the command still prints its
summary, then :meth:`Saving.finish` writes the result to a fallback file, names it in one
``error:`` line and exits with :data:`OUTPUT_FAILED`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from continuized.cli._errors import fail

__all__ = ["OUTPUT_FAILED", "Saving", "kept"]

OUTPUT_FAILED = 3
"""Exit code of a command that finished its work but could not write one of its outputs (its
result is then in a fallback file). 1 stays a failed run, 2 a usage error."""


class Saving:
    """The outputs of one command: what was written and what could not be."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.written: list[Path] = []
        self.failures: list[str] = []

    def write(self, option: str, path: Path | None, writer: Callable[[Path], object]) -> None:
        """Write ``path`` (creating its directory) with ``writer``, now; remember an OSError."""
        from continuized.gossip.files.destinations import unwritten

        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            writer(path)
        except OSError as exc:
            self.failures.append(unwritten(option, path, exc))
        else:
            self.written.append(path)

    def report(self, result: Mapping[str, Any]) -> typer.Exit | None:
        """``None`` if every write succeeded; else keep ``result`` and return the Exit (3)."""
        return kept(self.command, self.failures, result) if self.failures else None

    def finish(self, result: Mapping[str, Any]) -> None:
        """Return if every write succeeded; else keep ``result`` and raise the Exit (3)."""
        lost = self.report(result)
        if lost is not None:
            raise lost


def kept(command: str, failures: Sequence[str], result: Mapping[str, Any]) -> typer.Exit:
    """Write ``result`` to a fallback file, say so in one line, return the Exit (code 3)."""
    from continuized.gossip.files.destinations import keep_result

    path = keep_result(command, result)
    where = (
        f"the result is kept in {path}"
        if path is not None
        else "no fallback file could be written either (the summary above is all there is)"
    )
    return fail(f"could not write {'; '.join(failures)}; {where}", OUTPUT_FAILED)
