"""The coordinator: registration and bootstrap of the nodes, metrics, and the local launcher.

One subpackage per concept, from the bottom up:

machine
    What the coordinator asks of this machine: child processes and ports.
figures
    The run's figures from the nodes' reports (pure): state, records, metrics, exact curve.
mqtt
    The coordinator's broker link and the broker's access rules.
membership
    Registration, its server, the handshakes a start waits for, and the run's keys.
dashboard
    The live dashboard (aiohttp), its page and scripts.
run
    One run: its settings, :class:`~coordinator.run.service.Coordinator` and its decisions.
local
    What ``gossip up`` starts on this machine (:func:`~coordinator.local.launcher.run_up`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from continuized.coordinator.dashboard import serve
    from continuized.coordinator.figures.records import (
        ErrorPoint,
        FinalResult,
        NodeView,
        RunSummary,
    )
    from continuized.coordinator.figures.state import ClusterState
    from continuized.coordinator.local.launcher import run_up
    from continuized.coordinator.local.settings import UpConfig
    from continuized.coordinator.run.config import CoordinatorConfig, prepare
    from continuized.coordinator.run.service import Coordinator

__all__ = [
    "ClusterState",
    "Coordinator",
    "CoordinatorConfig",
    "ErrorPoint",
    "FinalResult",
    "NodeView",
    "RunSummary",
    "UpConfig",
    "prepare",
    "run_up",
    "serve",
]

# The public names, imported on first use: ``import coordinator.figures.state`` (the dashboard, the
# tests) must not pull in ZeroMQ, MQTT and aiohttp.
_HOMES = {
    "ClusterState": "continuized.coordinator.figures.state",
    "Coordinator": "continuized.coordinator.run.service",
    "CoordinatorConfig": "continuized.coordinator.run.config",
    "ErrorPoint": "continuized.coordinator.figures.records",
    "FinalResult": "continuized.coordinator.figures.records",
    "NodeView": "continuized.coordinator.figures.records",
    "RunSummary": "continuized.coordinator.figures.records",
    "UpConfig": "continuized.coordinator.local.settings",
    "prepare": "continuized.coordinator.run.config",
    "run_up": "continuized.coordinator.local.launcher",
    "serve": "continuized.coordinator.dashboard",
}


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
