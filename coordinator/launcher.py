"""``gossip up``: a broker, the coordinator and N node processes on this machine, as one run.

Theory of operation
-------------------
* The broker is the one of :func:`coordinator.broker.broker_for` (external URL, a mosquitto
  child process, or in-process amqtt).
* The coordinator runs in this process (its :class:`~coordinator.state.ClusterState` feeds the
  progress bar directly) and binds its registration socket on a free loopback port.
* Each node is a real OS process, ``python -m cli.app node --coordinator ...``, started in
  its own session and set to die with this process (:mod:`coordinator.procs`). Its output goes to
  ``<log_dir>/node-<k>.log``.
* Secure by default: fresh keys in ``<log_dir>/keys`` (:func:`gossip.keys.init_keys`), CurveZMQ
  on every ZeroMQ socket, and, with the embedded mosquitto, a password per role and an ACL
  (:mod:`coordinator.mqtt_auth`). ``secure=False`` (``gossip up --insecure``) turns it all off.
* A watchdog fails the run early, naming the node and its log, if a node exits with an error
  before the run is over (without it the coordinator would only notice at its timeout).
* Whatever ends the run (the summary, an error, Ctrl-C, SIGTERM), every node is stopped
  (SIGTERM to its process group, then SIGKILL) and the broker shut down before
  :func:`run_up` returns or raises; nodes that got the stop command exit by themselves first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import zmq

from coordinator._groups import single_error
from coordinator.broker import (
    BrokerKind,
    MosquittoAuth,
    RunningBroker,
    broker_for,
    redact_broker_url,
)
from coordinator.mqtt_auth import write_mosquitto_auth
from coordinator.procs import free_port, spawn, stop_all
from coordinator.security import load_security
from coordinator.service import Coordinator, CoordinatorConfig, prepare
from coordinator.state import ClusterState, RunSummary
from gossip.errors import GossipError
from gossip.keys import COORDINATOR, init_keys

__all__ = ["NodeCrashError", "UpConfig", "node_argv", "run_up"]

log = logging.getLogger(__name__)

_NODE_EXIT_GRACE = 10.0  # seconds for stopped nodes to publish their final state and exit


class NodeCrashError(GossipError):
    """A node process exited with an error before the run was over."""


@dataclass(frozen=True, slots=True)
class UpConfig:
    """Settings of ``gossip up`` beyond the coordinator's own.

    Attributes
    ----------
    coordinator : CoordinatorConfig
        Graph, algorithm, rate, eps, values, files, dashboard; ``broker`` and ``bind`` are
        filled in by the launcher.
    broker : str or None
        ``mqtt://host:port`` of an external broker; ``None``: an embedded one.
    embedded : {"auto", "mosquitto", "amqtt"}
        Which embedded broker (``auto``: mosquitto if installed, else amqtt).
    timeout : float
        Seconds after the start of t before the run is stopped as not converged.
    node_args : tuple of str
        Extra arguments for every ``gossip node`` (for example ``--fault drop=0.1``).
    log_dir : Path
        Where the nodes' logs go.
    host : str
        Loopback address everything binds to.
    secure : bool
        CurveZMQ with fresh keys in ``log_dir/keys``, and MQTT passwords and ACL with the
        embedded mosquitto (see the module header). False: plain sockets, anonymous MQTT.
    """

    coordinator: CoordinatorConfig
    log_dir: Path
    broker: str | None = None
    embedded: BrokerKind = "auto"
    timeout: float = 300.0
    node_args: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    secure: bool = True


def node_argv(coordinator: str, name: str, host: str, extra: Sequence[str] = ()) -> list[str]:
    """Return the command line of one local node process."""
    return [
        sys.executable,
        "-m",
        "cli.app",
        "node",
        "--coordinator",
        coordinator,
        "--name",
        name,
        "--host",
        host,
        *extra,
    ]


async def run_up(
    config: UpConfig,
    on_start: Callable[[ClusterState, RunningBroker], None] = lambda state, broker: None,
) -> RunSummary:
    """Run the whole local cluster until the coordinator's summary; stop everything after.

    ``on_start`` is called once the broker is up and the coordinator created, with the state
    the caller can watch (the progress bar does).

    Raises
    ------
    GossipError
        A bad setting, a broker or socket failure, a registration timeout, or
        :class:`NodeCrashError`.
    """
    state, plan = prepare(config.coordinator)
    config.log_dir.mkdir(parents=True, exist_ok=True)
    auth = None
    if config.secure:
        keys = config.log_dir / "keys"
        init_keys(keys, [f"node-{k}" for k in range(plan.expected)], zmq.curve_keypair, force=True)
        security = load_security(keys / COORDINATOR)
        passwd, acl = write_mosquitto_auth(keys / "mqtt", security.mqtt_secret, plan.expected)
        auth = MosquittoAuth(passwd, acl)
        plan = dataclasses.replace(plan, security=security)
    async with broker_for(config.broker, config.embedded, config.host, auth) as broker:
        if plan.security is not None and not broker.access_controlled:
            # Our passwords mean nothing to this broker: use the URL's credentials as they are.
            plan = dataclasses.replace(
                plan, security=dataclasses.replace(plan.security, mqtt_secret="")
            )
            if broker.kind == "amqtt":
                log.warning(
                    "the in-process amqtt broker has no passwords or ACL: MQTT is NOT access "
                    "controlled (exchanges still are); install mosquitto for a secure broker"
                )
        bind = f"tcp://{config.host}:{free_port(config.host)}"
        coord_config = dataclasses.replace(
            config.coordinator,
            broker=broker.url,
            bind=bind,
            run_timeout=config.timeout,
            keep_running=False,
            # A fresh local run never adopts what an earlier run left on a shared broker.
            resume=False,
        )
        state.broker.url = redact_broker_url(broker.url)
        plan = dataclasses.replace(plan, broker=broker.url)
        coordinator = Coordinator(coord_config, state, plan, broker_kind=broker.kind)
        on_start(state, broker)
        procs: list[asyncio.subprocess.Process] = []
        try:
            with single_error():
                summary = await _run_nodes(coordinator, config, bind, procs)
            await _wait_exit(procs, _NODE_EXIT_GRACE)
            return summary
        finally:
            await stop_all(procs)


async def _run_nodes(
    coordinator: Coordinator,
    config: UpConfig,
    bind: str,
    procs: list[asyncio.subprocess.Process],
) -> RunSummary:
    state, plan = coordinator.state, coordinator.plan
    # The nodes get their settings from their arguments only: a GOSSIP_* variable meant for
    # `gossip up` (GOSSIP_TIMEOUT, GOSSIP_BIND, ...) means something else to `gossip node`.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    async with asyncio.TaskGroup() as tg:
        run = tg.create_task(coordinator.run(), name="coordinator")
        await _first(coordinator.bound, run)
        for k in range(plan.expected):
            name = f"node-{k}"
            extra = list(config.node_args)
            if config.secure:
                extra += ["--keys", str(config.log_dir / "keys" / name)]
            argv = node_argv(bind, name, config.host, extra)
            procs.append(await spawn(argv, log=config.log_dir / f"{name}.log", env=env))
        watchdog = tg.create_task(_watch_nodes(procs, config.log_dir, state), name="node-watchdog")
        summary = await run
        watchdog.cancel()
    assert summary is not None  # the launcher always has a broker
    return summary


async def _first(event: asyncio.Event, run: asyncio.Task[RunSummary | None]) -> None:
    """Wait for ``event``, unless ``run`` ends first (then raise its error)."""
    wait_task = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({wait_task, run}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not wait_task.done():
            wait_task.cancel()
    if run.done() and not wait_task.done():
        run.result()  # re-raises the coordinator's error
        raise GossipError("the coordinator ended before binding its registration socket")


async def _watch_nodes(
    procs: Sequence[asyncio.subprocess.Process], log_dir: Path, state: ClusterState
) -> None:
    waits = {asyncio.ensure_future(p.wait()): k for k, p in enumerate(procs)}
    try:
        pending = set(waits)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                code = task.result()
                if code != 0 and state.phase in ("registering", "running"):
                    k = waits[task]
                    log = log_dir / f"node-{k}.log"
                    tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
                    raise NodeCrashError(
                        f"node-{k} exited with code {code} during the run (log: {log})\n{tail}"
                    )
    finally:
        for task in waits:
            task.cancel()


async def _wait_exit(procs: Sequence[asyncio.subprocess.Process], grace: float) -> None:
    if not procs:
        return
    try:
        async with asyncio.timeout(grace):
            await asyncio.gather(*(p.wait() for p in procs))
    except TimeoutError:
        pass  # stop_all in the caller terminates the stragglers
