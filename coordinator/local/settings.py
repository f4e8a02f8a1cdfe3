"""The settings of ``gossip up`` beyond the coordinator's own, checked before anything starts.

:func:`check_up` checks every setting of an :class:`UpConfig`, output paths included, and
returns the coordinator's state and plan without starting anything or writing a file: a bad
setting leaves no broker, no node and no file behind. :func:`coordinator.local.launcher.run_up`
then runs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.local.broker import BrokerKind, embedded_binary
from continuized.coordinator.local.node_commands import NodeEntries
from continuized.coordinator.membership.plan import Plan
from continuized.coordinator.run.config import CoordinatorConfig, prepare
from continuized.gossip.errors import ConfigError
from continuized.gossip.files.destinations import check_dir_destination
from continuized.gossip.wire.pubsub import parse_broker

__all__ = ["UpConfig", "check_up"]


@dataclass(frozen=True, slots=True)
class UpConfig:
    """Settings of ``gossip up`` beyond the coordinator's own.

    Attributes
    ----------
    coordinator : CoordinatorConfig
        Graph, algorithm, rate, eps, values, files, dashboard; ``broker`` and ``bind`` are
        filled in by the launcher.
    log_dir : Path
        Where the nodes' logs go.
    entries : NodeEntries
        The modules the node processes and their fork server run (the command line's own).
    broker : str or None
        ``mqtt://host:port`` of an external broker; ``None``: an embedded one.
    embedded : {"auto", "mosquitto", "amqtt"}
        Which embedded broker (``auto``: mosquitto if installed, else the in-process amqtt;
        both enforce the run's passwords and ACL).
    timeout : float
        Seconds after the start of t before the run is stopped as not converged.
    node_args : tuple of str
        Extra arguments for every ``gossip node`` (for example ``--fault drop=0.1``).
    host : str
        Loopback address everything binds to.
    nodes_per_process : int
        Host mode: at most this many nodes per OS process (1: one process per node).
    fork : bool
        Fork the node processes from the fork server (default); False: start each with a
        fresh interpreter, as before the fork server (the start-up benchmark's baseline).
    max_restarts : int
        Restarts allowed per node process within the run (0: the first crash fails it).
    secure : bool
        CurveZMQ with fresh keys in ``log_dir/keys``, and MQTT passwords and ACL on the
        embedded broker (see the module header). False: plain sockets, anonymous MQTT.
    """

    coordinator: CoordinatorConfig
    log_dir: Path
    entries: NodeEntries
    broker: str | None = None
    embedded: BrokerKind = "auto"
    timeout: float = 300.0
    node_args: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    nodes_per_process: int = 1
    fork: bool = True
    max_restarts: int = 3
    secure: bool = True

    def __post_init__(self) -> None:
        if self.nodes_per_process < 1:
            raise ConfigError(f"--nodes-per-process must be >= 1, got {self.nodes_per_process}")
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts must be >= 0, got {self.max_restarts}")


def check_up(config: UpConfig) -> tuple[ClusterState, Plan]:
    """Check every setting of ``config`` and return the coordinator's state and plan.

    Nothing is started and no file is written: ``gossip up`` calls it before the broker, the
    log directory or any node exists, so a bad setting leaves nothing behind. Each output
    (``--json``, ``--metrics-file``, ``--log-dir``, ``--dashboard-runs-dir``) is checked here
    too (:mod:`gossip.files.destinations`): a run never ends by failing to write its result.

    Raises
    ------
    ConfigError
        The first bad setting, naming it and what would be valid.
    """
    state, plan = prepare(config.coordinator)
    if not (math.isfinite(config.timeout) and config.timeout > 0):
        raise ConfigError(
            f"--timeout must be a finite number of seconds > 0, got {config.timeout!r}"
        )
    if config.broker is not None:
        parse_broker(config.broker)
    else:  # the embedded broker must exist; an external one is reached in run_up, first
        embedded_binary(config.embedded)
    check_dir_destination("--log-dir", config.log_dir)
    return state, plan
