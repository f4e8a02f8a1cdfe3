"""Measure the shape of the code: what a newcomer walks through before reading a line of it.

Prints, for the project's four packages:

* the top-level entries of ``gossip/``, ``node/`` and ``coordinator/`` (modules and
  subpackages), against each one's limit;
* the import floors inside each of them: the longest chain of imports between its top-level
  entries (an entry that imports no other entry is on floor 1; a cycle between entries fails);
* import circles inside any package (type-checking imports count: a reader follows them too);
* module basenames that repeat across packages;
* modules longer than ``--max-lines`` lines (a module has one job; a longer one holds two).

``scripts/check`` runs it: a circle always fails. With ``--strict`` the layout targets fail
too (at most :data:`MAX_ENTRIES` entries per package, ``--max-floors`` floors, no repeated
basename outside :data:`ALLOWED_REPEATS` and :data:`PARALLEL`).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import grimp

PACKAGES = ("gossip", "node", "coordinator", "cli")
INSTALLED = "continuized"  # the one installed name; the four folders are its subpackages
# The packages a newcomer walks by concept, and how many top-level entries each may have.
MAX_ENTRIES = {"gossip": 12, "node": 14, "coordinator": 8}
# Names that mean the same role in every package, not the same contents.
ALLOWED_REPEATS = frozenset({"__init__", "__main__", "errors"})
# The same part in parallel packages: the gossip simulator and the dual one are built alike
# (a numba kernel, its driver, a numpy engine), and each of node and coordinator has its config.
PARALLEL = {
    "compiled": {"gossip/dual", "gossip/sim"},
    "engine": {"gossip/dual", "gossip/sim"},
    "kernel": {"gossip/dual", "gossip/sim"},
    "result": {"gossip/dual", "gossip/optim"},
    "config": {"node", "coordinator/run"},
}


def top_entries(root: Path) -> list[str]:
    """Return the modules and subpackages directly inside package ``root``."""
    names = []
    for path in sorted(root.iterdir()):
        if path.name in ("__init__.py", "__pycache__", "py.typed"):
            continue
        if path.suffix == ".py" or (path / "__init__.py").is_file():
            names.append(path.stem)
    return names


def entry_imports(graph: grimp.ImportGraph, package: str) -> dict[str, set[str]]:
    """Return which top-level entries of ``package`` each of its entries imports."""

    def entry(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[:2] == [INSTALLED, package] else None

    arrows: dict[str, set[str]] = defaultdict(set)
    for module in graph.modules:
        a = entry(module)
        if a is None:
            continue
        arrows[a]
        for imported in graph.find_modules_directly_imported_by(module):
            b = entry(imported)
            if b is not None and b != a:
                arrows[a].add(b)
    return arrows


def floors(arrows: dict[str, set[str]]) -> int:
    """Return the length of the longest import chain between entries (``-1``: a cycle)."""
    state: dict[str, int] = {}

    def height(name: str, path: frozenset[str]) -> int:
        if name in path:
            raise RecursionError(name)
        if name not in state:
            below = [height(b, path | {name}) for b in arrows.get(name, ())]
            state[name] = 1 + max(below, default=0)
        return state[name]

    try:
        return max((height(a, frozenset()) for a in arrows), default=0)
    except RecursionError:
        return -1


def circles(graph: grimp.ImportGraph, package: str) -> list[tuple[str, str]]:
    """Return the pairs of modules of ``package`` that import each other, directly or not."""
    modules = sorted(m for m in graph.modules if m.startswith(f"{INSTALLED}.{package}."))
    found = []
    for i, a in enumerate(modules):
        for b in modules[i + 1 :]:
            if a.startswith(b + ".") or b.startswith(a + "."):
                continue  # a package and its own parts: __init__ re-exports them
            if graph.find_shortest_chain(a, b) and graph.find_shortest_chain(b, a):
                found.append((a, b))
    return found


def repeated_basenames(root: Path) -> dict[str, list[str]]:
    """Return the module basenames found in more than one package, with their paths."""
    seen: dict[str, list[str]] = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path.stem not in ALLOWED_REPEATS:
                seen[path.stem].append(str(path.relative_to(root)))
    return {
        name: paths
        for name, paths in seen.items()
        if len(paths) > 1 and {str(Path(p).parent) for p in paths} != PARALLEL.get(name)
    }


def long_modules(root: Path, limit: int) -> list[tuple[str, int]]:
    """Return the modules of the four packages longer than ``limit`` lines, with their length."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            count = len(path.read_text().splitlines())
            if count > limit:
                found.append((str(path.relative_to(root)), count))
    return found


def main(argv: list[str] | None = None) -> int:
    """Print the figures; return 1 on a circle (or, with ``--strict``, a missed target)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strict", action="store_true", help="fail on the layout targets too")
    parser.add_argument("--max-floors", type=int, default=6)
    parser.add_argument("--max-lines", type=int, default=500)
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    missed = cyclic = False
    graph = grimp.build_graph(INSTALLED)
    for package, limit in MAX_ENTRIES.items():
        entries = top_entries(root / package)
        n_floors = floors(entry_imports(graph, package))
        shown = "a cycle between entries" if n_floors < 0 else n_floors
        print(f"{package}/ top-level entries: {len(entries)} (target <= {limit})")
        print(f"import floors between {package}/'s entries: {shown} (target <= {args.max_floors})")
        missed |= n_floors < 0 or len(entries) > limit or n_floors > args.max_floors
        cyclic |= n_floors < 0
    found = [c for p in PACKAGES for c in circles(graph, p)]
    repeats = repeated_basenames(root)
    print(f"import circles: {len(found)}")
    for a, b in found:
        print(f"  {a} <-> {b}")
    print(f"repeated basenames: {len(repeats)}")
    for name, paths in sorted(repeats.items()):
        print(f"  {name}: {', '.join(paths)}")
    long = long_modules(root, args.max_lines)
    print(f"modules over {args.max_lines} lines: {len(long)}")
    for path, count in long:
        print(f"  {path}: {count}")
    failed = bool(found) or cyclic
    if args.strict:
        failed |= missed or bool(repeats) or bool(long)
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
