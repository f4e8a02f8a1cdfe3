"""``gossip up``'s restart policy: what it did to the node processes, and the run's record.

A node process that dies during the run is started again under the same name, on the same
address (so it recovers its exact state from its neighbours' ledgers), up to ``max_restarts``
times per process; with ``new_address`` on a fresh port instead (:func:`moved_command`), as a
node restarted by DHCP or in a new container would be: it tells its neighbours where it is.
:class:`Supervision` counts the restarts and keeps a list of events (each restart, the failure
that ended the run); :func:`run_record` turns them, with what the
coordinator knew, into the ``--json`` record, which is written whether the run reached eps,
failed or was interrupted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from continuized.coordinator.figures.records import RunSummary
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.machine.ports import free_port_block
from continuized.coordinator.run.runlog import write_json
from continuized.gossip.errors import ConfigError

__all__ = [
    "Supervision",
    "moved_command",
    "run_record",
    "write_record",
]


@dataclass(slots=True)
class Supervision:
    """The restart policy of one run and what it did.

    Attributes
    ----------
    max_restarts : int
        Restarts allowed per node process within the run; one more crash fails the run.
    restarts : dict of str to int
        Restarts so far, per process name (``node-4``, ``host-1``); only names restarted.
    events : list of dict
        In order: ``{"event": "restart", "process", "code", "restart", "wall"}`` for each
        restart, ``{"event": "failure", "message", "wall"}`` for what ended a failed run.
    failure : str or None
        Why the run failed (``None`` while it has not).
    new_address : bool
        Restart a process on a fresh port rather than its own (see :func:`moved_command`).
    record : dict or None
        The run's ``--json`` record (:func:`run_record`), once the run ended.
    unwritten : list of str
        The outputs that could not be written (``--json 'PATH' (reason)``), one phrase each:
        not a failure of the run, whose record the caller then keeps elsewhere.
    """

    max_restarts: int = 3
    restarts: dict[str, int] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    failure: str | None = None
    new_address: bool = False
    record: dict[str, Any] | None = None
    unwritten: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts must be >= 0, got {self.max_restarts}")

    def may_restart(self, name: str) -> bool:
        """Whether process ``name`` may be restarted once more."""
        return self.restarts.get(name, 0) < self.max_restarts

    def restarted(self, name: str, code: int) -> int:
        """Count a restart of ``name`` (which exited with ``code``); return its number."""
        count = self.restarts.get(name, 0) + 1
        self.restarts[name] = count
        self.events.append(
            {"event": "restart", "process": name, "code": code, "restart": count,
             "wall": time.time()}
        )  # fmt: skip
        return count

    def restart_command(self, command: Sequence[str]) -> tuple[int, list[str]] | None:
        """The port and command to restart a process with on a new address (``new_address``,
        see :func:`moved_command`); ``None``: restart it as it was, on its address."""
        return moved_command(command) if self.new_address else None

    def failed(self, message: str) -> None:
        """Record what ended the run (the first failure wins)."""
        if self.failure is None:
            self.failure = message
            self.events.append({"event": "failure", "message": message, "wall": time.time()})


def moved_command(command: Sequence[str]) -> tuple[int, list[str]]:
    """Return a fresh port and ``command`` (a ``gossip node`` command) bound there instead,
    on the same host.

    The new port block is disjoint from the old one (``--bind tcp://HOST:PORT``, and
    ``--nodes-per-process`` ports from it in host mode), which the dead process just freed.

    Raises
    ------
    ConfigError
        ``command`` has no ``--bind``, or no free port block was found.

    Examples
    --------
    >>> port, cmd = moved_command(["node", "--bind", "tcp://127.0.0.1:1"])
    >>> cmd[2] == f"tcp://127.0.0.1:{port}" and port != 1
    True
    """
    out = list(command)
    if "--bind" not in out[:-1]:
        raise ConfigError(f"cannot move a node command without --bind: {out!r}")
    at = out.index("--bind") + 1
    host, _, old_port = out[at].removeprefix("tcp://").rpartition(":")
    old = int(old_port)
    size = int(out[out.index("--nodes-per-process") + 1]) if "--nodes-per-process" in out else 1
    for _ in range(50):
        port = free_port_block(host, size)
        if port + size <= old or port >= old + size:
            out[at] = f"tcp://{host}:{port}"
            return port, out
    raise ConfigError(f"found no free port block on {host} apart from port {old}")


def run_record(
    supervision: Supervision,
    state: ClusterState,
    summary: RunSummary | None,
    written: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``--json`` record of a run: the coordinator's own plus restarts, events, failure.

    ``written`` is what the coordinator wrote at the end of the run (``None`` when the run
    failed before it could: then the record is built from the live ``state``).
    """
    if written is not None:
        record = dict(written)
    elif summary is not None:
        record = summary.as_dict()
    else:
        record = {
            "run_id": state.run_id,
            "stop_reason": "failed",
            "reached": False,
            "t_eps": None,
            "wall_s": None,
            "t_eps_estimate": state.t_eps_estimate,
            "activations": state.activations(),
            # No final reports: the final error is unknown; the last estimate is only that.
            "final_t": None,
            "final_error": None,
            "last_t_estimate": state.t if state.history else None,
            "last_error_estimate": state.error,
            "exact_points": len(state.exact) + state.exact_dropped,
            "complete": False,
            "graph": state.graph,
            "algorithm": state.algorithm,
            "nodes": state.expected,
            "eps": state.eps,
        }
    if supervision.failure is not None:
        record["reached"] = False
    record["failure"] = supervision.failure
    record["restarts"] = dict(supervision.restarts)
    record["restarts_total"] = sum(supervision.restarts.values())
    record["events"] = list(supervision.events)
    return record


def write_record(path: Path, record: dict[str, Any]) -> None:
    """Write ``record`` as the run's ``--json`` file."""
    write_json(path, record)
