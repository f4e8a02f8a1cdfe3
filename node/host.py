"""Host mode: K independent nodes in one OS process and one event loop.

``gossip node --nodes-per-process K`` runs K nodes side by side. Each keeps its own sockets
(a ROUTER and a DEALER per neighbour), state, clocks and identity (its name registers with
the coordinator like any node), so nothing about the protocol changes, and nodes of one
process still talk to each other over ZeroMQ sockets, on its ``inproc`` transport
(:mod:`node.transport.colocation`). What they share is what costs memory and
start-up time per process rather than per node: the Python interpreter and its imports, one
ZeroMQ context (one I/O thread), one event loop and one MQTT connection per broker account that
carries its nodes' reports (:class:`node.mqtt.NodeMqtt` with several members). Insecure, and
secure under ``gossip up`` (whose host process has one account, allowed to publish exactly its
own nodes' state: :func:`gossip.wire.access.acl_grants`), that is one connection per
process. Nodes that got accounts of their own (``node-<id>``: a host of hand-made keys) keep a
connection each, and only the first of them subscribes to the control and status topics.

Names and addresses: node i of a host named ``NAME`` is ``NAME-i``; with a fixed port
(``--bind tcp://HOST:PORT``) node i binds ``PORT + i``, so a restarted host gets its nodes'
addresses back. A host of one node keeps the name and address as given.

Registration: the process registers its nodes in one message (one socket and, secure, one CURVE
connection, on its first node's key), which the coordinator takes when that key's process holds
every name in it (``gossip up``'s host processes do); refused, the nodes register one by one.
Registered together, the nodes beat together too: their lifelines share one socket
(:class:`node.lifeline.LifelineGroup`).

Security: with keys (``--keys`` once per node, or ``--keys-pool``) every node of the process has
its own CURVE key pair, registers with it under its key's name (or in its process's batch), and
its ROUTER has a ZAP domain of its own that admits only that node's neighbours
(:mod:`node.transport.curve`); the process's one ZAP handler serves them all.

Ready before t = 0: the nodes set up (:func:`node.warmup.set_up`) before they register ready,
and the coordinator fixes t = 0 once every node is (:func:`node.registration.register_ready`).

Crash semantics: a host process that dies takes its K nodes with it. Restarted with the same
name (and addresses), each of its nodes re-registers, gets its id back and rebuilds its exact
state from its neighbours' ledgers, like any killed node. A stop (SIGTERM, Ctrl-C, the control
topic, the retained status) stops all K nodes; an error in one node stops the process.

Standing (``gossip node --standing``): when a run stops, the process stays, and its nodes
register again for the standing coordinator's next run, each on fresh sockets and a fresh
state; only a signal ends the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import math
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from continuized.gossip.errors import ConfigError, GossipError
from continuized.gossip.files.keys import Identity, load_identity
from continuized.gossip.wire.pubsub import parse_broker
from continuized.gossip.wire.schema import Bootstrap
from continuized.node.config import NodeConfig, host_configs
from continuized.node.daemon import Node
from continuized.node.lifeline import Lifeline, LifelineGroup
from continuized.node.mqtt import NodeMqtt
from continuized.node.problem import preload
from continuized.node.registration import register_ready
from continuized.node.transport.colocation import Colocation
from continuized.node.transport.curve import CurveKeys, PeerAuthenticator
from continuized.node.transport.faults import FaultyTransport
from continuized.node.transport.interface import Transport
from continuized.node.transport.zeromq import ZmqTransport
from continuized.node.warmup import Setup, set_up, set_up_all, warm_up

__all__ = ["host_configs", "run_host", "run_host_sync", "run_node", "run_node_sync"]

log = logging.getLogger(__name__)
_REBIND_WAIT = 5.0  # seconds a standing node waits for its fixed port to be free again

# Seconds a stopped host waits for the coordinator to take its final reports over the lifeline:
# long enough for a coordinator killed while stopping to be restarted and take them (it then
# holds the stop decision, coordinator.run.status); a coordinator that never answered a beat is
# not waited for.
_DELIVER_WAIT = 10.0


async def _bind(
    config: NodeConfig,
    identity: Identity | None,
    ctx: zmq.Context[zmq.Socket[bytes]],
    again: bool,
    colocation: Colocation | None = None,
) -> ZmqTransport:
    """The node's transport, bound to ``config.bind``; ``again`` (a standing node's next run):
    a fixed port the last run's socket still holds is tried again for up to
    :data:`_REBIND_WAIT` s (ZeroMQ frees a closed socket's port a moment after the close).
    ``colocation``: the process's other nodes, reached over ``inproc``."""
    keys = None if identity is None else CurveKeys.of(identity)
    deadline = time.monotonic() + _REBIND_WAIT
    while True:
        try:
            return ZmqTransport(
                config.bind,
                config.advertise,
                toward=config.coordinator,
                context=ctx,
                keys=keys,
                colocation=colocation,
            )
        except ConfigError as exc:
            cause = exc.__context__
            busy = isinstance(cause, zmq.ZMQError) and cause.errno == zmq.EADDRINUSE
            if not (again and busy) or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.05)


def _node(
    config: NodeConfig,
    boot: Bootstrap,
    transport: Transport,
    stop: asyncio.Event,
    offset: float = 0.0,
    received: float | None = None,
    setup: Setup | None = None,
) -> Node:
    log.info(
        "node %d (%s, %s) of %s: %d neighbours, rate %g/s",
        boot.node_id,
        config.name,
        transport.address,
        boot.cluster,
        len(boot.neighbors),
        boot.rate,
    )
    # Whether this node comes back to a running cluster: decided by when its Bootstrap came
    # (``received``), not by when the node is built. A slow load, or the 63 nodes built before
    # it (4,096 nodes on 2 cores: the last ones 9 s past the epoch), must not make a fresh node
    # ask its neighbours for ledgers they do not have.
    came = time.time() if received is None else received
    recover = boot.rate * (came - boot.epoch) > 0
    # Set up now unless done from a draft of this Bootstrap: a restarted node, or a joiner.
    setup = set_up(config, boot, setup)
    problem, learner = setup.problem, setup.learner
    late = boot.rate * (time.time() - boot.epoch)
    if (problem is not None or learner is not None) and late > 0:
        log.warning(
            "%s loaded its problem %.0f units of t after the start: its first activations "
            "come late (give the node --data to read the data before registering, or the "
            "coordinator a longer --start-delay)",
            config.name,
            late,
        )
    node = Node(
        boot,
        transport,
        problem=problem,
        learner=learner,
        name=config.name,
        timeout=config.timeout,
        max_timeout=config.max_timeout,
        drain=config.drain,
        linger=config.linger,
        seed=config.seed,
        recover=recover,
        max_in_flight=config.max_in_flight,
        clock=_skewed(offset) if offset else time.time,
    )
    node.stop_requested = stop  # one stop for the whole process
    return node


def _skewed(offset: float) -> Callable[[], float]:
    """``time.time`` offset by ``offset`` seconds: a host clock that is not synchronised."""

    def clock() -> float:
        return time.time() + offset

    return clock


def _mqtt_links(nodes: Sequence[Node], ca: Path | None = None) -> list[NodeMqtt | None]:
    """The MQTT connection of each node: one per distinct broker account (broker URL).

    Insecure, or secure with a host account (``host-<j>``, which may publish the state of all
    the process's nodes), every node's bootstrap has the same broker URL, so one connection
    reports them all. With accounts of their own (``node-<id>``), the broker's ACL lets each
    publish only its own state: then each node keeps a connection of its own to publish, but
    only the first subscribes to the control and status topics, for the whole process
    (:meth:`node.mqtt.NodeMqtt.follow`).
    """
    links: dict[str, NodeMqtt | None] = {}
    out: list[NodeMqtt | None] = []
    for node in nodes:
        boot = node.boot
        if boot.broker in links:
            link = links[boot.broker]
            if link is not None:
                link.add(boot.node_id, node.report, node.request_stop)
            out.append(link)
            continue
        broker = parse_broker(boot.broker) if boot.broker else None
        if broker is not None and ca is not None:
            broker = dataclasses.replace(broker, ca=str(ca))
        link = None
        if broker is not None:
            link = NodeMqtt(
                broker,
                boot.cluster,
                boot.node_id,
                node.report,
                boot.metrics_period,
                node.request_stop,
                epoch=boot.epoch,
            )
        links[boot.broker] = link
        out.append(link)
    for node, link in zip(nodes, out, strict=True):
        if link is not None:
            link.on_command(node.membership.on_command)
    # Secure, one connection per node publishes (the ACL), but one subscribes for them all:
    # the control and status topics are the same for every node, and each subscribed
    # connection would receive (and decode) its own copy of every message.
    distinct = list({id(link): link for link in out if link is not None}.values())
    for link in distinct[1:]:
        link.follow(distinct[0])
    return out


def _lifeline(
    config: NodeConfig,
    node: Node,
    mqtt: NodeMqtt | None,
    context: zmq.asyncio.Context,
    identity: Identity | None,
) -> Lifeline:
    """The beats of ``node`` to its coordinator (:mod:`node.lifeline`, its orphan rule)."""
    return Lifeline(
        config.coordinator,
        config.name,
        node.boot.epoch,
        node.request_stop,
        lambda: node.final,
        (lambda: math.inf) if mqtt is None else mqtt.lost_for,
        orphan_after=config.orphan_after,
        context=context,
        keys=None if identity is None else CurveKeys.of(identity),
        coordinator_key="" if identity is None else identity.coordinator,
    )


async def _delivered(lifelines: Sequence[Lifeline], within: float) -> None:
    """Wait until the coordinator holds every final report, at most ``within`` seconds (it may
    have taken them over MQTT and gone). A report too large for a beat went over MQTT only
    (:data:`node.lifeline.FINAL_ROOM`): its beats say so, and the coordinator answers one
    once it holds the report, as it answers the others (but an older coordinator, which
    refuses the beat that says so, is not waited for)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            for line in lifelines:
                await line.wait_taken()


async def run_host(configs: Sequence[NodeConfig], standing: bool = False) -> int:
    """Run the nodes of ``configs`` in this process: register, gossip, stop. Async; returns 0.

    Prints each node's final report as one JSON line on stdout when it stops. With
    ``standing`` the process does not exit when a run stops: its nodes register again, under
    the same names, and take part in the coordinator's next run (``gossip coordinator
    --standing``), until SIGTERM or Ctrl-C. Each run starts from fresh sockets and a fresh
    state (the next Bootstrap's values, parameters and epoch); a Bootstrap of a run this
    process already took part in (the last run's registrar, still answering while it
    collects the final reports) is never run twice.

    Raises
    ------
    GossipError
        A bad setting (ConfigError), a refused registration (RemoteError), or a socket
        failure or registration timeout (TransportError), of any of the nodes.
    """
    if not configs:
        raise ConfigError("a host needs at least one node (--nodes-per-process >= 1)")
    for data in sorted({config.data for config in configs if config.data}):
        preload(data)  # before any clock can start: see node.problem.preload
    stop = asyncio.Event()  # the process's: a signal
    current = [asyncio.Event()]  # the running run's: a signal, or the coordinator's stop

    def stop_all() -> None:
        stop.set()
        current[0].set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_all)
    # CurveZMQ: every node of the process has its own key pair and its own ZAP domain
    # (node.transport.curve), so each admits only its own neighbours.
    if len({config.keys is None for config in configs}) > 1:
        raise ConfigError("either every node of a host has keys (--keys) or none has")
    identities = [None if c.keys is None else load_identity(c.keys) for c in configs]
    # One context, so one zmq I/O thread, for every socket of the process and of every run.
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    code = 0
    done: set[float] = set()  # the epochs of the runs taken part in: each names its run
    # Secure and standing: the context's ZAP handler outlives every run's servers. Stopped when
    # a run's last server closes, the handler started again for the next run admitted no one.
    keeper = (
        PeerAuthenticator.for_context(ctx).gate()
        if standing and identities[0] is not None
        else None
    )
    try:
        while not stop.is_set():
            current[0] = asyncio.Event()
            epoch = await _run_once(configs, identities, ctx, current[0], done)
            if epoch is None:  # stopped while registering
                break
            code = max(code, epoch[1])
            done.add(epoch[0])
            if not standing:
                break
            gc.unfreeze()  # this run's objects may go now: the next run builds its own
            log.info("the run is over; standing: registering for the next run")
        return code
    finally:
        if keeper is not None:
            keeper.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        ctx.term()


async def _run_once(
    configs: Sequence[NodeConfig],
    identities: Sequence[Identity | None],
    ctx: zmq.Context[zmq.Socket[bytes]],
    stop: asyncio.Event,
    done: set[float],
) -> tuple[float, int] | None:
    """One run of the host's nodes, on fresh sockets: ``(its epoch, exit code)``, or None
    when ``stop`` came before the Bootstraps (a run of an epoch in ``done`` is skipped)."""
    secure = identities[0] is not None
    async with contextlib.AsyncExitStack() as stack:
        transports: list[Transport] = []
        inners: list[ZmqTransport] = []
        # A node of one is dialled by nobody of its process: no inproc endpoint to bind.
        colocation = Colocation() if len(configs) > 1 else None
        for config, identity in zip(configs, identities, strict=True):
            inner = await _bind(config, identity, ctx, again=bool(done), colocation=colocation)
            inners.append(inner)
            transport: Transport = (
                FaultyTransport(inner, config.faults, config.seed)
                if config.faults.active
                else inner
            )
            transports.append(await stack.enter_async_context(transport))
        actx = zmq.asyncio.Context(ctx)  # a shadow: the same context, asyncio sockets
        setups: dict[int, Setup] = {}  # set up from the drafts, before the nodes said ready
        registered = await register_ready(
            configs,
            [t.address for t in transports],
            actx,
            identities,
            done,
            lambda drafts: setups.update(set_up_all(configs, drafts)),
            stop,
        )
        if registered is None:
            return None
        boots, batched = registered
        received = time.time()  # the Bootstraps came: before the epoch, every node is fresh
        if secure:  # each node admits its own neighbours' keys only, each as its node id
            for inner, boot in zip(inners, boots, strict=True):
                inner.trust({n.peer_id: n.key for n in boot.neighbors})
        # One wall clock per process, as per host: a skew fault sets it from the first seed.
        offset = configs[0].faults.clock_offset(configs[0].seed, configs[0].name)
        if offset:
            log.warning("this host's wall clock is offset by %+.1f ms (fault)", offset * 1e3)
        nodes = [
            _node(config, boot, transport, stop, offset, received, setups.get(k))
            for k, (config, boot, transport) in enumerate(
                zip(configs, boots, transports, strict=True)
            )
        ]
        if not setups:  # else warmed up before the nodes said they were ready
            # Before t = 0: the first exchanges are not slower.
            warm_up(boots[0].dim, problems=[n.problem for n in nodes if n.problem is not None])
        # Everything built so far lives as long as the run: keep it out of the collector's
        # generations, so that collections stay short during the run.
        gc.collect()
        gc.freeze()
        mqtts = _mqtt_links(nodes, configs[0].mqtt_ca)
        lifelines = [
            _lifeline(config, node, mqtt, actx, identity)
            for config, node, mqtt, identity in zip(configs, nodes, mqtts, identities, strict=True)
        ]
        async with asyncio.TaskGroup() as tg:
            for line, node in zip(lifelines, nodes, strict=True):
                node.final_taken = line.delivered
                node.on_final = line.kick
            if batched:  # registered together, so they beat together: one socket
                first = identities[0]
                group = LifelineGroup(
                    lifelines,
                    context=actx,
                    keys=None if first is None else CurveKeys.of(first),
                    coordinator_key="" if first is None else first.coordinator,
                )
                beats = [tg.create_task(group.run(), name="host-lifelines")]
            else:
                beats = [
                    tg.create_task(line.run(), name=f"node-lifeline-{node.boot.node_id}")
                    for line, node in zip(lifelines, nodes, strict=True)
                ]
            distinct = {id(m): m for m in mqtts if m is not None}.values()
            links = [tg.create_task(m.run(), name=f"host-mqtt-{i}") for i, m in enumerate(distinct)]
            runs = [
                tg.create_task(node.run(mqtt, run_mqtt=False), name=f"node-{node.boot.node_id}")
                for node, mqtt in zip(nodes, mqtts, strict=True)
            ]
            codes = [await run for run in runs]
            for m in distinct:
                m.stop()
            for link in links:
                link.cancel()
            await _delivered(lifelines, _DELIVER_WAIT)
            for beat in beats:
                beat.cancel()
        for node in nodes:
            sys.stdout.write(json.dumps(node.final) + "\n")
        sys.stdout.flush()
        return boots[0].epoch, max(codes)


def _first_error(group: BaseExceptionGroup[BaseException]) -> GossipError | None:
    for exc in group.exceptions:
        if isinstance(exc, GossipError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _first_error(exc)
            if found is not None:
                return found
    return None


def run_host_sync(configs: Sequence[NodeConfig], standing: bool = False) -> int:
    """Run :func:`run_host` in a new event loop (uvloop if installed); return its exit code.

    Raises
    ------
    GossipError
        As :func:`run_host`; taken out of the task groups' ExceptionGroup, so that the
        command line reports it in one line.
    """
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]

        runner: Callable[[Coroutine[Any, Any, int]], int] = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        return int(runner(run_host(configs, standing)))
    except BaseExceptionGroup as group:
        first = _first_error(group)
        if first is None:
            raise
        raise first from None


async def run_node(config: NodeConfig) -> int:
    """Run one node process: register, gossip, stop on command or signal. Async; returns 0.

    A host of one node (:func:`run_host`). Prints the final report as one JSON
    line on stdout when it stops.

    Raises
    ------
    GossipError
        A bad setting (ConfigError), a refused registration (RemoteError), or a socket
        failure or registration timeout (TransportError).
    """
    return await run_host([config])


def run_node_sync(config: NodeConfig) -> int:
    """Run :func:`run_node` in a new event loop (uvloop if installed); return its exit code.

    Raises
    ------
    GossipError
        As :func:`run_node`, in one line (not wrapped in an ExceptionGroup).
    """
    return run_host_sync([config])
