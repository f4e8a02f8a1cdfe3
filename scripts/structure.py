"""Measure the shape of the code: what a newcomer walks through before reading a line of it.

Prints, for the project's four packages:

* the top-level entries of ``gossip/`` (modules and subpackages);
* the import floors inside ``gossip/``: the longest chain of imports between its modules
  (a module that imports nothing of gossip is on floor 1);
* import circles inside any package (type-checking imports count: a reader follows them too);
* module basenames that repeat across packages.

``scripts/check`` runs it: a circle always fails. With ``--strict`` the layout targets fail
too (at most ``--max-entries`` entries, ``--max-floors`` floors, no repeated basename outside
``--allow-repeat``).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections import defaultdict
from pathlib import Path

import grimp

PACKAGES = ("gossip", "node", "coordinator", "cli")
# Names that mean the same role in every package, not the same contents.
ALLOWED_REPEATS = frozenset({"__init__", "__main__", "errors"})


def top_entries(root: Path) -> list[str]:
    """Return the modules and subpackages directly inside package ``root``."""
    names = []
    for path in sorted(root.iterdir()):
        if path.name in ("__init__.py", "__pycache__", "py.typed"):
            continue
        if path.suffix == ".py" or (path / "__init__.py").is_file():
            names.append(path.stem)
    return names


def floors(graph: grimp.ImportGraph, package: str) -> int:
    """Return the length of the longest import chain between the modules of ``package``."""
    modules = {m for m in graph.modules if m.startswith(package)}

    @functools.cache
    def height(module: str) -> int:
        below = [m for m in graph.find_modules_directly_imported_by(module) if m in modules]
        # Importing one's own package (__init__) is not a floor: it re-exports the others.
        below = [m for m in below if not module.startswith(m + ".")]
        return 1 + max((height(m) for m in below), default=0)

    return max(height(m) for m in modules)


def circles(graph: grimp.ImportGraph, package: str) -> list[tuple[str, str]]:
    """Return the pairs of modules of ``package`` that import each other, directly or not."""
    modules = sorted(m for m in graph.modules if m.startswith(package))
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
    return {name: paths for name, paths in seen.items() if len(paths) > 1}


def main(argv: list[str] | None = None) -> int:
    """Print the figures; return 1 on a circle (or, with ``--strict``, a missed target)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strict", action="store_true", help="fail on the layout targets too")
    parser.add_argument("--max-entries", type=int, default=12)
    parser.add_argument("--max-floors", type=int, default=6)
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    entries = top_entries(root / "gossip")
    gossip_graph = grimp.build_graph("gossip")
    n_floors = floors(gossip_graph, "gossip")
    found = [c for p in PACKAGES for c in circles(grimp.build_graph(p), p)]
    repeats = repeated_basenames(root)
    print(f"gossip/ top-level entries: {len(entries)} (target <= {args.max_entries})")
    print(f"import floors inside gossip/: {n_floors} (target <= {args.max_floors})")
    print(f"import circles: {len(found)}")
    for a, b in found:
        print(f"  {a} <-> {b}")
    print(f"repeated basenames: {len(repeats)}")
    for name, paths in sorted(repeats.items()):
        print(f"  {name}: {', '.join(paths)}")
    failed = bool(found)
    if args.strict:
        failed |= len(entries) > args.max_entries or n_floors > args.max_floors or bool(repeats)
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
