"""Print the requirements of some extras of continuized-gossip, one a line.

    python3 deploy/extras_requirements.py pyproject.toml sim,data
    python3 deploy/extras_requirements.py dist/continuized_gossip-0.1.0-py3-none-any.whl sim,data

The image (deploy/Dockerfile, build argument EXTRAS), scripts/docker-image --extras and a Pi's
install.sh --extras install these next to deploy/requirements.txt, then the project with
--no-deps: installing ``project[extras]`` would also pull the whole core, amqtt included, which
the image and the Pis leave out. An extra naming others (``all``) is expanded. Standard library
only: it runs on a bare python3 before anything is installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

PROJECT = "continuized-gossip"


def declared_extras(source: Path) -> dict[str, list[str]]:
    """Each extra's requirements, from a pyproject.toml or from a wheel's METADATA."""
    if source.suffix == ".whl":
        with zipfile.ZipFile(source) as wheel:
            name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
            metadata = wheel.read(name).decode()
        extras: dict[str, list[str]] = {}
        for line in metadata.splitlines():
            if line.startswith("Provides-Extra:"):
                extras.setdefault(line.split(":", 1)[1].strip(), [])
            found = re.fullmatch(r"Requires-Dist:\s*(.+?)\s*;\s*extra\s*==\s*['\"](.+?)['\"]", line)
            if found:
                extras.setdefault(found.group(2), []).append(found.group(1))
        return extras
    project = tomllib.loads(source.read_text())["project"]
    return dict(project.get("optional-dependencies", {}))


def expand(names: str, declared: dict[str, list[str]], seen: set[str]) -> Iterator[str]:
    """The requirements of the comma-separated extras ``names``, those of nested extras too."""
    for name in filter(None, (n.strip() for n in names.split(","))):
        if name not in declared:
            valid = ", ".join(sorted(declared))
            raise SystemExit(f"extras_requirements: no extra '{name}' (valid: {valid})")
        if name in seen:
            continue
        seen.add(name)
        for requirement in declared[name]:
            nested = re.fullmatch(rf"{PROJECT}\[(.*)\]", requirement.replace(" ", ""))
            yield from expand(nested.group(1), declared, seen) if nested else [requirement]


def main(argv: list[str]) -> int:
    """Print the requirements of ``argv[1]`` (extras) declared in ``argv[0]`` (a source)."""
    if len(argv) != 2:
        print("usage: extras_requirements.py PYPROJECT_OR_WHEEL EXTRA[,EXTRA...]", file=sys.stderr)
        return 2
    requirements = dict.fromkeys(expand(argv[1], declared_extras(Path(argv[0])), set()))
    print("\n".join(requirements))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
