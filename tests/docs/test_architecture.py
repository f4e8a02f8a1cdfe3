"""docs/architecture.md is true and whole: what it names exists, and it names every package."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGES = ("gossip", "node", "coordinator", "cli")

# `gossip/model/mixing.py`, `node/`, `coordinator/dashboard/`, `gossip.model.mixing`
_PATH = re.compile(r"`((?:gossip|node|coordinator|cli|tests)(?:/[\w.]+)*/?)`")
_DOTTED = re.compile(r"`((?:gossip|node|coordinator|cli)(?:\.\w+)+)`")
_BARE_MODULE = re.compile(r"`(\w+\.py)`")


def _named_paths(text: str) -> set[str]:
    """Paths in backquotes, less placeholders such as ``cli/NAME_cmd.py``."""
    return {m.group(1) for m in _PATH.finditer(text) if "NAME" not in m.group(1)}


def _packages() -> list[str]:
    """Every package of the four, as ``gossip/model/``."""
    found = []
    for top in PACKAGES:
        for init in sorted((ROOT / top).rglob("__init__.py")):
            found.append(init.parent.relative_to(ROOT).as_posix() + "/")
    return found


def test_every_path_the_page_names_exists() -> None:
    text = PAGE.read_text()
    missing = [p for p in sorted(_named_paths(text)) if not (ROOT / p.rstrip("/")).exists()]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_dotted_module_the_page_names_exists() -> None:
    text = PAGE.read_text()
    missing = []
    for dotted in sorted({m.group(1) for m in _DOTTED.finditer(text)}):
        parts = dotted.split(".")
        # The longest prefix that is a module or package; a remainder must be its attribute.
        for cut in range(len(parts), 0, -1):
            base = ROOT.joinpath(*parts[:cut])
            if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
                break
        else:
            missing.append(dotted)
            continue
        if len(parts) - cut > 1:
            missing.append(dotted)  # at most one attribute after the module
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_every_module_named_in_a_package_row_exists() -> None:
    """The package table names its modules bare (``mixing.py``): each is in that package."""
    missing = []
    for line in PAGE.read_text().splitlines():
        row = re.match(r"\| `(gossip/\w+/)` \|(.*)\|$", line)
        if row is None:
            continue
        package, cells = row.groups()
        for name in _BARE_MODULE.findall(cells):
            if not (ROOT / package / name).is_file():
                missing.append(package + name)
    assert not missing, f"the package table names modules that do not exist: {missing}"


def test_the_page_names_every_package() -> None:
    named = _named_paths(PAGE.read_text())
    unnamed = [p for p in _packages() if p not in named and p.rstrip("/") not in named]
    assert not unnamed, f"docs/architecture.md does not name these packages: {unnamed}"


def test_every_core_module_is_in_its_package_row() -> None:
    """Each module of a core subpackage with a row of its own is named in that row."""
    rows = {}
    for line in PAGE.read_text().splitlines():
        row = re.match(r"\| `(gossip/\w+/)` \|(.*)\|$", line)
        if row is not None:
            rows[row.group(1)] = set(_BARE_MODULE.findall(row.group(2)))
    listed = {p: names for p, names in rows.items() if names}  # rows that list their files
    assert "gossip/exchange/" in listed
    assert "gossip/model/" in listed
    left_out = [
        package + path.name
        for package, names in listed.items()
        for path in sorted((ROOT / package).glob("*.py"))
        if path.name != "__init__.py" and not path.name.startswith("_") and path.name not in names
    ]
    assert not left_out, f"modules missing from their package's row: {left_out}"
