"""The node's configuration: everything ``gossip node`` accepts, as one frozen value."""

from __future__ import annotations

import dataclasses
import math
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from continuized.gossip.errors import ConfigError
from continuized.gossip.files.keys import load_identity
from continuized.node.transport.faults import FaultSpec

__all__ = ["NodeConfig", "default_node_name", "host_configs", "parse_value"]


def parse_value(text: str) -> tuple[float, ...]:
    """Parse ``21.5`` or ``1,2,3`` into a tuple of finite floats.

    Examples
    --------
    >>> parse_value("1, 2.5,-3")
    (1.0, 2.5, -3.0)
    """
    parts = [p.strip() for p in text.split(",")]
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise ConfigError(
            f"--value must be a number or comma-separated numbers (21.5 or 1,2,3), got {text!r}"
        ) from None
    if not all(math.isfinite(v) for v in values):
        raise ConfigError(f"--value must be finite, got {text!r}")
    return values


def default_node_name() -> str:
    """Return ``HOSTNAME-PID``, the default node name."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """How to run one node process.

    Attributes
    ----------
    coordinator : str
        The coordinator's registration ROUTER, ``tcp://host:5555``.
    value : tuple of float or None
        This node's own initial value; ``None`` lets the coordinator choose.
    bind : str
        Where this node's ROUTER binds (``tcp://0.0.0.0:0``: any interface, a free port).
    advertise : str or None
        Host peers use to reach us (default: the interface that reaches the coordinator).
    name : str
        The node's name; a restarted node registering under the same name gets its id back.
    faults : FaultSpec
        Fault injection on outgoing frames (none by default).
    timeout, max_timeout : float
        First and largest retry timeout of an exchange, in seconds.
    drain : float
        Seconds to keep serving normally after a stop, before refusing new exchanges.
    linger : float
        After the final report, the longest wait in seconds for every neighbour to be done
        with this node's answers (:mod:`gossip.exchange.parting`; they say so within a round trip or
        two, a dead neighbour never does).
    register_every : float
        Seconds between re-sent registrations while waiting for the bootstrap.
    register_timeout : float or None
        Give up waiting for the bootstrap after this many seconds (``None``: wait forever).
    seed : int or None
        Seed of the node's Poisson clocks and fault injection (``None``: from the OS).
    max_in_flight : int or None
        Most exchanges this node started that may be pending on one edge (``None``, the
        default: no limit); further ticks of that edge are skipped (back-pressure).
    keys : Path or None
        This node's key directory (:mod:`gossip.files.keys`): CurveZMQ on every socket, the
        coordinator's key checked at registration. ``None``: plain, unauthenticated sockets.
    mqtt_ca : Path or None
        CA certificate (PEM) to check an ``mqtts://`` broker with (default: the system's).
    data : str or None
        Optimization runs: a data spec on this machine replacing the coordinator's (this
        node's shard is cut from it by the run's split), see :mod:`node.problem`.
    orphan_after : float or None
        Seconds without broker and coordinator after which the node stops by itself
        (:mod:`node.lifeline`; ``None``: never).
    """

    coordinator: str
    value: tuple[float, ...] | None = None
    bind: str = "tcp://0.0.0.0:0"
    advertise: str | None = None
    name: str = field(default_factory=default_node_name)
    faults: FaultSpec = field(default_factory=FaultSpec)
    timeout: float = 0.2
    max_timeout: float = 2.0
    drain: float = 0.5
    linger: float = 10.0
    register_every: float = 2.0
    register_timeout: float | None = None
    seed: int | None = None
    max_in_flight: int | None = None
    keys: Path | None = None
    mqtt_ca: Path | None = None
    data: str | None = None
    orphan_after: float | None = 60.0

    def __post_init__(self) -> None:
        if not self.coordinator.startswith(("tcp://", "ipc://", "inproc://")):
            raise ConfigError(
                f"--coordinator must be a zmq address like tcp://host:5555, got "
                f"{self.coordinator!r}"
            )
        if not self.name or len(self.name) > 200:
            raise ConfigError(f"--name must be 1 to 200 characters, got {self.name!r}")
        for key in ("timeout", "max_timeout", "register_every"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{key} must be > 0 seconds, got {value!r}")
        for key in ("drain", "linger"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{key} must be >= 0 seconds, got {value!r}")
        if self.orphan_after is not None and not (
            math.isfinite(self.orphan_after) and self.orphan_after > 0
        ):
            raise ConfigError(
                f"--orphan-after must be > 0 seconds (or 0 for never), got {self.orphan_after!r}"
            )
        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise ConfigError(
                f"--max-in-flight must be >= 1 (or 0 for no limit), got {self.max_in_flight}"
            )
        if self.max_timeout < self.timeout:
            raise ConfigError(
                f"max_timeout ({self.max_timeout}) must be >= timeout ({self.timeout})"
            )


def host_configs(
    config: NodeConfig, count: int, keys: Sequence[Path] | None = None
) -> list[NodeConfig]:
    """Return the configurations of the ``count`` nodes of a host started with ``config``.

    Node i is named ``NAME-i``, binds ``PORT + i`` if ``config.bind`` has a fixed port, and
    seeds its clock with ``seed + i``; one node keeps ``config`` as it is. With ``keys`` (one
    key directory per node) node i is secure with ``keys[i]`` and named after its key, the
    only name the coordinator accepts from it.

    Examples
    --------
    >>> base = NodeConfig("tcp://127.0.0.1:5555", name="h", bind="tcp://127.0.0.1:7000")
    >>> [(c.name, c.bind) for c in host_configs(base, 2)]
    [('h-0', 'tcp://127.0.0.1:7000'), ('h-1', 'tcp://127.0.0.1:7001')]
    """
    if count < 1:
        raise ConfigError(f"--nodes-per-process must be >= 1, got {count}")
    if keys is not None:
        if len(keys) != count:
            raise ConfigError(
                f"{count} node(s) per process need as many key directories, got {len(keys)}: "
                "give --keys once per node, or --keys-pool"
            )
        names = [load_identity(key).name for key in keys]  # a clear error now if one is bad
        configs = host_configs(dataclasses.replace(config, keys=None), count)
        return [
            dataclasses.replace(c, name=name, keys=key)
            for c, name, key in zip(configs, names, keys, strict=True)
        ]
    if count == 1:
        return [config]
    parts = urlsplit(config.bind)
    try:
        port = parts.port if parts.scheme == "tcp" else None
    except ValueError:
        raise ConfigError(f"--bind has a bad port: {config.bind!r}") from None
    if port and port + count - 1 > 65535:
        raise ConfigError(
            f"--bind port {port} + {count} nodes per process goes past 65535; "
            "use a lower port or port 0"
        )
    configs = []
    for i in range(count):
        bind = config.bind
        if port:
            bind = f"tcp://{config.bind[len('tcp://') :].rsplit(':', 1)[0]}:{port + i}"
        configs.append(
            dataclasses.replace(
                config,
                name=f"{config.name}-{i}",
                bind=bind,
                seed=None if config.seed is None else config.seed + i,
            )
        )
    return configs
