"""The coordinator: registration and bootstrap of the nodes, metrics, and the local launcher.

Modules
-------
state, records
    :class:`~coordinator.state.ClusterState`, the in-process view the dashboard serves (C4),
    and the records it holds (node views, error points, final result, run summaries).
registry, registrar
    Registration as a sans-IO state machine, and the ZeroMQ ROUTER that drives it (C2).
metrics, agreement
    The error and mass drift from node reports (consistent cut, mixed to a common t), and the
    comparison of a run's error curve with the simulator's band.
mqtt_link, runlog
    The coordinator's MQTT connection (C3) and its metrics / summary files.
evaluation, outcome, status
    The error point from the latest reports, the exact outcome of a stopped run, and the
    retained status message (with when a run can be resumed).
exact_curve, convergence
    The network's exact error at the grid times every node has passed (from the nodes'
    traces), and the rule that says when a run has reached eps and at which t.
config, service
    The settings (checked) and :class:`~coordinator.service.Coordinator`: ``gossip coordinator``.
broker, mqtt_auth, amqtt_access, procs, launcher
    The embedded broker (mosquitto or in-process amqtt) and the one MQTT password file and ACL
    both enforce, child processes that never outlive their parent, and ``gossip up``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator.config import CoordinatorConfig, prepare
    from coordinator.dashboard import serve
    from coordinator.launcher import UpConfig, run_up
    from coordinator.records import ErrorPoint, FinalResult, NodeView, RunSummary
    from coordinator.service import Coordinator
    from coordinator.state import ClusterState

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

# The public names, imported on first use: ``import coordinator.state`` (the dashboard, the
# tests) must not pull in ZeroMQ, MQTT and aiohttp.
_HOMES = {
    "ClusterState": "coordinator.state",
    "Coordinator": "coordinator.service",
    "CoordinatorConfig": "coordinator.config",
    "ErrorPoint": "coordinator.records",
    "FinalResult": "coordinator.records",
    "NodeView": "coordinator.records",
    "RunSummary": "coordinator.records",
    "UpConfig": "coordinator.launcher",
    "prepare": "coordinator.config",
    "run_up": "coordinator.launcher",
    "serve": "coordinator.dashboard",
}


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'coordinator' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
