"""The code under test, in either layout: ``scripts/bench-compare`` also runs trees from before
the project installed one name (``gossip.x`` there, ``continuized.gossip.x`` since).

``benchmarks/compare.py`` says which in ``GOSSIP_BENCH_PACKAGE`` (empty: the old layout); a
driver run by hand measures this checkout.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PACKAGE = os.environ.get("GOSSIP_BENCH_PACKAGE", "continuized")
"""The installed package the tree's folders live in; empty for a tree from before it."""

PREFIX = f"{PACKAGE}." if PACKAGE else ""
"""What goes before a module's repository path (``gossip.model.ledger``) to import it."""


def project(path: str) -> ModuleType:
    """Import the tree's module at repository path ``path`` (such as ``gossip.model.ledger``)."""
    return importlib.import_module(PREFIX + path)
