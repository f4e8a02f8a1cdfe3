"""Where a command writes: every output path checked before any work, and a result kept anyway.

The rule: a command checks each of its output paths (:func:`check_file_destination`,
:func:`check_dir_destination`) before it starts a simulation, a broker or a node, so that a
bad path costs a one-line error and nothing else. The check creates nothing: it finds the
nearest existing ancestor of the directory to write into, which must be a directory, and tries
to create (and at once removes) an entry in it, since ``os.access`` says yes to root for any
directory (``/proc`` included).

A write can still fail at the end (a full disk, a directory removed during the run): then
:func:`keep_result` writes the result to a fallback file, in the current directory or else in
the system's temporary directory, so that a finished result is never lost.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from continuized.gossip.errors import ConfigError

__all__ = ["check_dir_destination", "check_file_destination", "keep_result", "unwritten"]


def check_file_destination(option: str, path: Path, suffixes: Sequence[str] | None = None) -> Path:
    """Return ``path`` if ``option`` can write a file there, creating nothing; else raise.

    Raises
    ------
    ConfigError
        ``path`` is a directory, its suffix is not one of ``suffixes``, or its directory is
        not (and cannot be made) a directory this process can write into; the message names
        ``option``, the path, what is wrong and what to do.
    """
    if path.is_dir():
        raise ConfigError(
            f"{option} {str(path)!r} is a directory; give a file name, e.g. "
            f"{option} {str(path / ('out' + (suffixes[0] if suffixes else '.json')))!r}"
        )
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise ConfigError(
            f"{option} {str(path)!r} has suffix {path.suffix!r}; valid: {', '.join(suffixes)}"
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(
            f"{option} {str(path)!r} exists and is read-only; make it writable or choose "
            "another path"
        )
    _check_creatable(option, path, path.parent)
    return path


def check_dir_destination(option: str, path: Path) -> Path:
    """Return ``path`` if ``option`` can write files in that directory, creating nothing.

    Raises
    ------
    ConfigError
        ``path`` exists and is not a directory, or it is not (and cannot be made) a directory
        this process can write into; the message names ``option``, the path and the fix.
    """
    if path.exists() and not path.is_dir():
        raise ConfigError(
            f"{option} {str(path)!r} exists and is not a directory; give a directory (it is "
            "created if missing)"
        )
    _check_creatable(option, path, path)
    return path


def _check_creatable(option: str, path: Path, directory: Path) -> None:
    """Raise unless ``directory`` is, or can be created as, a directory we can write into."""
    existing = directory  # as the user wrote it, so that the message quotes their words
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(
            f"{option} {str(path)!r}: {str(existing)!r} exists and is not a directory; remove "
            "it or choose another path"
        )
    try:
        probe = tempfile.mkdtemp(prefix=".gossip-check-", dir=existing)
    except OSError as exc:
        raise ConfigError(
            f"{option} {str(path)!r}: cannot write into {str(existing)!r} "
            f"({exc.strerror or exc}); choose a directory you can write to"
        ) from None
    os.rmdir(probe)


def unwritten(option: str, path: Path, exc: OSError) -> str:
    """One phrase for an output that could not be written: ``--json 'a/x.json' (reason)``."""
    reason = exc.strerror or str(exc)
    if isinstance(exc, FileExistsError) and exc.filename is not None:
        # Creating the file's directory met a file of that name (a directory since replaced).
        reason = f"{str(exc.filename)!r} exists and is not a directory"
    elif exc.filename is not None and str(exc.filename) != str(path):
        reason = f"{reason}: {str(exc.filename)!r}"
    return f"{option} {str(path)!r} ({reason})"


def keep_result(command: str, result: Mapping[str, Any]) -> Path | None:
    """Write ``result`` as JSON to a fallback file and return its path (``None``: nowhere).

    The file is ``gossip-<command>-<YYYYmmdd-HHMMSS>-<pid>.json`` in the current directory,
    or in the system's temporary directory when the current one takes no file.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"gossip-{command.replace(' ', '-')}-{stamp}-{os.getpid()}.json"
    text = json.dumps(_finite(result), indent=2, default=str) + "\n"
    for directory in (".", tempfile.gettempdir()):
        path = Path(directory) / name
        try:
            path.write_text(text, encoding="utf-8")
        except OSError:
            continue
        return path
    return None


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
