"""``gossip up``: a broker, the coordinator and N node processes on this machine, as one run.

Theory of operation
-------------------
* The broker is the one of :func:`coordinator.local.broker.broker_for` (external URL, a mosquitto
  child process, or in-process amqtt).
* The coordinator runs in this process (its :class:`~coordinator.figures.state.ClusterState`
  feeds the progress bar directly) and binds its registration socket on a free loopback port.
* Each node is a real OS process running ``gossip node --coordinator ...``, in its own session
  and set to die with this process (:mod:`coordinator.machine.children`). The processes are
  forked by a fork server (:mod:`coordinator.local.forking`) that imported the node
  code once, started before anything else so that its imports overlap the coordinator's
  preparation: a node process then starts in milliseconds instead of ~0.7 s of CPU. Its
  output goes to ``<log_dir>/node-<k>.log``.
* Host mode (``nodes_per_process`` K > 1): the N nodes run as ceil(N / K) processes
  ``host-<j>`` (``gossip node --nodes-per-process``, :mod:`node.host`), logging to
  ``<log_dir>/host-<j>.log``; their nodes are named ``host-<j>-<i>``, or, secure, after the
  keys ``node-<k>`` the host's nodes get (host j the next K of them, in order).
* Restart policy (:mod:`coordinator.local.supervise`): each process gets a fixed port chosen here
  (``--bind tcp://HOST:PORT``; host mode: node i of the process on PORT+i). A process that
  exits with an error before the run is over is started again under the same name on the same
  port, so its nodes recover their exact state from their neighbours' ledgers, up to
  ``max_restarts`` times per process; one more crash fails the run, naming the process and
  its log. Each restart is a line on stderr and an event in the ``--json`` record.
* The ``--json`` record is written however the run ends (reached, timeout, diverged, too many
  restarts, an error, Ctrl-C), with ``failure``, ``restarts`` and ``events``.
* Secure by default: fresh keys in ``<log_dir>/keys`` (:func:`gossip.files.keys.init_keys`),
  CurveZMQ on every ZeroMQ socket, and, with the embedded broker (mosquitto or amqtt alike), a
  password per role and an ACL (:mod:`gossip.wire.access`); host mode too (each node of a process
  has its own key and ZAP domain: :mod:`node.transport.curve`; the process has one broker account,
  which may publish only its own nodes' state). ``secure=False`` (``gossip up --insecure``)
  turns it all off.
* Whatever ends the run (the summary, an error, Ctrl-C, SIGTERM), every node is stopped
  (SIGTERM to its process group, then SIGKILL) and the broker shut down before
  :func:`run_up` returns or raises; nodes that got the stop command exit by themselves first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from continuized.coordinator.figures.records import RunSummary, error_text
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.figures.train_figures import accuracy_not_reached
from continuized.coordinator.local.broker import (
    BrokerAuth,
    RunningBroker,
    broker_for,
    reach_external,
)
from continuized.coordinator.local.forking import ForkServer, node_environment
from continuized.coordinator.local.node_commands import node_command
from continuized.coordinator.local.settings import UpConfig, check_up
from continuized.coordinator.local.supervise import Supervision, run_record, write_record
from continuized.coordinator.machine.children import (
    Child,
    node_niceness,
    python_module,
    spawn,
    stop_all,
)
from continuized.coordinator.machine.ports import free_port, free_port_block
from continuized.coordinator.membership.plan import Plan
from continuized.coordinator.membership.security import load_security
from continuized.coordinator.mqtt.auth import write_broker_auth
from continuized.coordinator.run._groups import single_error
from continuized.coordinator.run.config import secured
from continuized.coordinator.run.evaluation import divergence_text
from continuized.coordinator.run.service import Coordinator
from continuized.gossip.errors import GossipError
from continuized.gossip.files.destinations import unwritten
from continuized.gossip.files.keys import COORDINATOR, init_keys
from continuized.gossip.wire.access import host_sizes
from continuized.gossip.wire.pubsub import redact_broker

__all__ = [
    "NodeCrashError",
    "UpConfig",
    "check_up",
    "run_up",
]

log = logging.getLogger(__name__)

_NODE_EXIT_GRACE = 10.0  # seconds for stopped nodes to publish their final state and exit


class NodeCrashError(GossipError):
    """A node process exited with an error before the run was over."""


async def run_up(
    config: UpConfig,
    on_start: Callable[[ClusterState, RunningBroker], None] = lambda state, broker: None,
    prepared: tuple[ClusterState, Plan] | None = None,
    supervision: Supervision | None = None,
) -> RunSummary:
    """Run the whole local cluster until the coordinator's summary; stop everything after.

    ``on_start`` is called once the broker is up and the coordinator created, with the state
    the caller can watch (the progress bar does). ``prepared`` is what :func:`check_up`
    returned, when the caller already checked the settings (the graph's quantities are not
    computed twice). ``supervision`` receives the restarts and events (default: a fresh one
    with ``config.max_restarts``); the caller reads it after a failure. The ``--json`` file
    (``config.coordinator.json_path``) is written however the run ends.

    Raises
    ------
    GossipError
        A bad setting, a broker or socket failure, a registration timeout, or
        :class:`NodeCrashError` (a process crashed more than ``max_restarts`` times).
    """
    state, plan = prepared if prepared is not None else check_up(config)
    sup = supervision if supervision is not None else Supervision(config.max_restarts)
    config.log_dir.mkdir(parents=True, exist_ok=True)
    env = node_environment()
    json_path = config.coordinator.json_path
    try:
        if config.broker is not None:
            # An external broker that refuses is the user's to fix: say so before the fork
            # server costs a second.
            await reach_external(config.broker)
        # First, so that its imports (about a second) overlap the graph's quantities and the
        # broker.
        forks = (
            await ForkServer.start(
                config.entries.fork_server,
                env,
                log=config.log_dir / "forkserver.log",
                optimization=bool(config.coordinator.problem),
                training=config.coordinator.training is not None,
                nice=node_niceness(config.nodes_per_process),
            )
            if config.fork
            else None
        )
        try:
            summary, written = await _run_up(config, state, plan, on_start, forks, env, sup)
        finally:
            if forks is not None:
                await forks.aclose()
    except BaseException as exc:
        sup.failed(_failure_text(exc))
        sup.record = run_record(sup, state, None)
        _write_record(json_path, sup)
        raise
    if not summary.reached:
        sup.failed(_not_reached_text(summary, state, config))
    sup.record = run_record(sup, state, summary, written)
    _write_record(json_path, sup)
    return summary


def _write_record(path: Path | None, sup: Supervision) -> None:
    """Write the run's record to ``path`` (``--json``); a failure is noted in
    ``sup.unwritten``, never raised: the run's result stands, and the caller keeps it."""
    if path is None or sup.record is None:
        return
    try:
        write_record(path, sup.record)
    except OSError as exc:
        sup.unwritten.append(unwritten("--json", path, exc))


def _failure_text(exc: BaseException) -> str:
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt):
        return "interrupted (Ctrl-C or SIGTERM): every node and the broker were stopped"
    if isinstance(exc, GossipError):
        return str(exc).split("\n", 1)[0]  # the first line; a crash's log tail is in its log
    return f"{type(exc).__name__}: {exc}"


def _not_reached_text(summary: RunSummary, state: ClusterState, config: UpConfig) -> str:
    eps = config.coordinator.until
    if summary.stop_reason == "diverged":
        return f"diverged: {divergence_text(state)}"
    if summary.stop_reason == "timeout":
        training = accuracy_not_reached(state, config.timeout)
        if training is not None:
            return f"timeout: {training}"
        return (
            f"timeout: the error did not reach {eps:g} within --timeout {config.timeout:g} s "
            f"(final error {error_text(summary.final_error)})"
        )
    return f"{summary.stop_reason or 'stopped'}: the error did not reach {eps:g}"


async def _run_up(
    config: UpConfig,
    state: ClusterState,
    plan: Plan,
    on_start: Callable[[ClusterState, RunningBroker], None],
    forks: ForkServer | None,
    env: dict[str, str],
    sup: Supervision,
) -> tuple[RunSummary, dict[str, Any] | None]:
    """The run's summary and the coordinator's record (which :func:`run_up` completes)."""
    auth = None
    if config.secure:
        keys = config.log_dir / "keys"
        init_keys(keys, [f"node-{k}" for k in range(plan.expected)], zmq.curve_keypair, force=True)
        # Host mode: one broker account, hence one MQTT connection, per host process.
        per_process = config.nodes_per_process
        security = dataclasses.replace(
            load_security(keys / COORDINATOR), nodes=plan.expected, per_process=per_process
        )
        passwd, acl = write_broker_auth(
            keys / "mqtt", security.mqtt_secret, plan.expected, per_process
        )
        auth = BrokerAuth(passwd, acl)
        plan = secured(plan, security)
    async with broker_for(config.broker, config.embedded, config.host, auth) as broker:
        if plan.security is not None and not broker.access_controlled:
            # An external broker: our passwords mean nothing to it, so the URL's credentials
            # are used as they are.
            plan = dataclasses.replace(
                plan, security=dataclasses.replace(plan.security, mqtt_secret="")
            )
        port = free_port(config.host)
        bind = f"tcp://{config.host}:{port}"
        coord_config = dataclasses.replace(
            config.coordinator,
            broker=broker.url,
            bind=bind,
            run_timeout=config.timeout,
            keep_running=False,
            # A fresh local run never adopts what an earlier run left on a shared broker.
            resume=False,
            json_path=None,  # run_up writes the record, with the restarts and the failure
        )
        state.broker.url = redact_broker(broker.url)
        plan = dataclasses.replace(plan, broker=broker.url)
        coordinator = Coordinator(coord_config, state, plan, broker_kind=broker.kind)
        on_start(state, broker)
        slots = _slots(config, plan, bind, {port})
        procs: list[Child] = []

        async def start(slot: _Slot) -> Child:
            if forks is None:
                argv = python_module(config.entries.app, *slot.command)
                return await spawn(
                    argv, log=slot.log, env=env, nice=node_niceness(config.nodes_per_process)
                )
            return await forks.fork(slot.command, slot.log)

        try:
            with single_error():
                summary = await _run_nodes(coordinator, slots, procs, start, sup, broker)
            await _wait_exit(procs, _NODE_EXIT_GRACE)
            return summary, coordinator.record
        finally:
            sup.unwritten.extend(coordinator.log.failures)
            await stop_all(procs)


@dataclass(frozen=True, slots=True)
class _Slot:
    """One node process of the run: what starts it, again after a crash."""

    name: str
    port: int  # its (first) node's port: a restart comes back on the same address
    command: list[str]
    log: Path


def _slots(config: UpConfig, plan: Plan, bind: str, taken: set[int]) -> list[_Slot]:
    sizes = host_sizes(plan.expected, config.nodes_per_process)
    hosted = config.nodes_per_process > 1
    slots = []
    first = 0  # the first node key of host j: hosts take the keys node-0 .. node-(N-1) in order
    for j, size in enumerate(sizes):
        name = f"host-{j}" if hosted else f"node-{j}"
        port = free_port_block(config.host, size)
        while taken & set(range(port, port + size)):  # the OS may hand out a port twice
            port = free_port_block(config.host, size)
        taken.update(range(port, port + size))
        extra = [*config.node_args, *(("--nodes-per-process", str(size)) if hosted else ())]
        if plan.task is not None and plan.task.data and "--data" not in config.node_args:
            # Each node reads the data itself before registering (node.problem.preload),
            # so that no node's clock starts while it is still loading.
            extra += ["--data", plan.task.data]
        if plan.security is not None:  # one key pair per node, host mode included
            for k in range(first, first + size) if hosted else (j,):
                extra += ["--keys", str(config.log_dir / "keys" / f"node-{k}")]
        first += size
        command = node_command(bind, name, config.host, extra, port)
        slots.append(_Slot(name, port, command, config.log_dir / f"{name}.log"))
    return slots


async def _run_nodes(
    coordinator: Coordinator,
    slots: list[_Slot],
    procs: list[Child],
    start: Callable[[_Slot], Awaitable[Child]],
    sup: Supervision,
    broker: RunningBroker | None = None,
) -> RunSummary:
    async with asyncio.TaskGroup() as tg:
        run = tg.create_task(coordinator.run(), name="coordinator")
        keeper: asyncio.Task[None] | None = None
        if broker is not None and broker.keep is not None:
            running = broker
            keeper = tg.create_task(
                broker.keep(lambda code: _broker_may_restart(sup, running, code)),
                name="broker-supervisor",
            )
        await _first(coordinator.bound, run)
        for k, slot in enumerate(slots):
            procs.append(await _said_if_slow(start(slot), slot, k, len(slots), coordinator.state))
        supervisor = tg.create_task(
            _supervise_nodes(slots, procs, start, coordinator.state, sup),
            name="node-supervisor",
        )
        summary = await run
        supervisor.cancel()
        if keeper is not None:
            keeper.cancel()
    assert summary is not None  # the launcher always has a broker
    return summary


BROKER = "broker"
"""The embedded broker's name in the restart counts (``restarts``) and events."""


def _broker_may_restart(sup: Supervision, broker: RunningBroker, code: int | None) -> bool:
    """Count one failure of the embedded broker; whether it may come back (``max_restarts``,
    as a node process). Said on stderr, as a node's restart is."""
    if not sup.may_restart(BROKER):
        return False
    count = sup.restarted(BROKER, -1 if code is None else code)
    if code is None:
        how = "stopped serving"
    else:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    print(
        f"restart: the {broker.kind} broker {how} during the run; restarting it on port "
        f"{broker.port} with the same passwords and ACL (restart {count} of at most "
        f"{sup.max_restarts})",
        file=sys.stderr,
        flush=True,
    )
    return True


_SLOW_START = 10.0  # seconds a process may take to start before the launcher says it waits


async def _said_if_slow(
    starting: Awaitable[Child], slot: _Slot, k: int, total: int, state: ClusterState
) -> Child:
    """Await ``starting`` (process ``k`` of ``total``); every :data:`_SLOW_START` seconds it
    takes, say on stderr what the launch waits for, so that a stalled start is never silent."""
    task = asyncio.ensure_future(starting)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=_SLOW_START)
            if done:
                return task.result()
            print(
                f"still starting the node processes: {slot.name} ({k} of {total} started) "
                f"is not started yet; {len(state.registered)} of "
                f"{state.expected} nodes registered so far (Ctrl-C stops everything)",
                file=sys.stderr,
                flush=True,
            )
    finally:
        if not task.done():
            task.cancel()


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


async def _supervise_nodes(
    slots: list[_Slot],
    procs: list[Child],
    start: Callable[[_Slot], Awaitable[Child]],
    state: ClusterState,
    sup: Supervision,
) -> None:
    """Restart each process that exits with an error during the run, as a restart policy.

    ``procs[k]`` is replaced by the new incarnation of ``slots[k]`` (so the caller stops the
    live one). One crash more than ``sup.max_restarts`` raises :class:`NodeCrashError`.
    """
    waits = {asyncio.ensure_future(p.wait()): k for k, p in enumerate(procs)}
    try:
        while waits:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                k = waits.pop(task)
                code = task.result()
                if code == 0 or state.phase not in ("registering", "running"):
                    continue  # a clean exit, or the run is stopping: nothing to restart
                slot = slots[k]
                if not sup.may_restart(slot.name):
                    tail = slot.log.read_text(errors="replace")[-1500:] if slot.log.exists() else ""
                    raise NodeCrashError(
                        f"{slot.name} exited with code {code} during the run after "
                        f"{sup.restarts.get(slot.name, 0)} restart(s), the most --max-restarts "
                        f"{sup.max_restarts} allows (log: {slot.log})\n{tail}"
                    )
                moved = sup.restart_command(slot.command)  # None: on its own address
                if moved is not None:  # as DHCP or a new container would: another port
                    slots[k] = slot = dataclasses.replace(slot, port=moved[0], command=moved[1])
                count = sup.restarted(slot.name, code)
                print(
                    f"restart: {slot.name} exited with code {code} during the run; restarting "
                    f"it on port {slot.port} (restart {count} of at most {sup.max_restarts})",
                    file=sys.stderr,
                    flush=True,
                )
                procs[k] = await start(slot)
                waits[asyncio.ensure_future(procs[k].wait())] = k
    finally:
        for task in waits:
            task.cancel()


async def _wait_exit(procs: Sequence[Child], grace: float) -> None:
    if not procs:
        return
    try:
        async with asyncio.timeout(grace):
            await asyncio.gather(*(p.wait() for p in procs))
    except TimeoutError:
        pass  # stop_all in the caller terminates the stragglers
