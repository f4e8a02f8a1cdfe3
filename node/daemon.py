"""The node daemon: sockets, timers and task lifetimes around the exchange protocol.

All the protocol and all the maths live in :mod:`gossip.exchange` and :mod:`gossip.ledger`;
this module only feeds them frames and times and carries out what they return.

Tasks of a running node (one :class:`asyncio.TaskGroup`, every task named):

* ``node-receive`` -- frames in: hand each to the exchanger, send back its answer (a deferred
  request's answer once nothing of ours is in flight, see ``hold`` in
  :mod:`gossip.exchange`). With the ZeroMQ transport the frames are handled right in its socket
  callbacks (:meth:`Node._on_frame`, ``Transport.set_handler``) and this task only raises the
  transport's errors;
* ``node-ticks``   -- the node's Poisson clock: initiate an exchange at each tick; a late tick
  fires late, none is dropped (in hold mode it also waits while our exchange is in flight);
* ``node-retry``   -- re-send requests whose timeout passed;
* ``node-recover`` -- a restarted node asks its neighbours for their ledgers until recovered;
* ``node-mqtt``    -- reports and the control topic (only with a broker).

Stopping (``{"cmd": "stop"}``, SIGTERM, SIGINT): stop initiating; keep serving normally for
``drain`` seconds while our own exchanges settle; then close (new requests get a Nack, repeated
ones their cached answer), so the state is final; publish the final report; keep answering for
``linger`` seconds so the neighbours' retries are answered; exit 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from gossip.exchange import DEFERRED, Counters, Exchanger, Link, TimeBase
from gossip.ledger import Ledger
from gossip.wire import Bootstrap
from node.clock import PoissonClock
from node.config import NodeConfig
from node.mqtt import NodeMqtt
from node.transport import Transport

__all__ = ["Node", "run_node", "run_node_sync"]

log = logging.getLogger(__name__)

_RETRY_GRAIN = 0.01  # seconds; the retry task wakes at most this often (timeouts are longer)
_RECOVER_EVERY = 0.5  # seconds between LedgerRequests while recovering
_RECOVER_GIVE_UP = 10.0  # seconds before gossiping on without an unresponsive neighbour
# Seconds between two computations of the round-trip percentiles in the periodic reports: they
# sort thousands of samples (the costliest part of a report), and move slowly.
_RTT_EVERY = 1.0
_COUNTER_NAMES = tuple(f.name for f in dataclasses.fields(Counters))  # asdict() is slow


class Node:
    """One running node: its exchanger, clock and tasks.

    Parameters
    ----------
    boot : Bootstrap
        What the coordinator sent (id, neighbours, parameters, epoch, rate, initial value).
    transport : Transport
        Connected by :meth:`run` to the neighbours.
    name : str
        The node's name, for reports.
    timeout, max_timeout, drain, linger : float
        See :class:`node.config.NodeConfig`.
    seed : int or None
        Seed of the Poisson clock.
    recover : bool or None
        Rebuild the ledger from the neighbours first; default: when started after the epoch.
    max_in_flight : int or None
        Back-pressure: see :class:`gossip.exchange.Exchanger`.
    hold : bool
        Fidelity mode: see :class:`gossip.exchange.Exchanger` (ticks wait, never dropped).
    exact : bool
        Exact jumps by corrections: see :class:`gossip.exchange.Exchanger`.
    correction_tol : float
        Exact mode: the smallest correction sent, relative to the values (``rel_tol``).
    correction_horizon : float or None
        Exact mode: seconds after which a jump is final (``horizon``).
    clock : callable() -> float
        Unix time in seconds.
    """

    def __init__(
        self,
        boot: Bootstrap,
        transport: Transport,
        *,
        name: str = "",
        timeout: float = 0.2,
        max_timeout: float = 2.0,
        drain: float = 0.5,
        linger: float = 2.0,
        seed: int | None = None,
        recover: bool | None = None,
        max_in_flight: int | None = None,
        hold: bool = False,
        exact: bool = False,
        correction_tol: float = 1e-9,
        correction_horizon: float | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.boot = boot
        self.transport = transport
        self.name = name or f"node-{boot.node_id}"
        self.drain = drain
        self.linger = linger
        self.clock = clock
        self.timebase = TimeBase(boot.epoch, boot.rate)
        if recover is None:
            recover = self.timebase.t(clock()) > 0
        links = [Link(n.edge_index, n.peer_id, n.prob) for n in boot.neighbors]
        ledger = Ledger(boot.initial_value, [link.edge for link in links], eta=boot.eta)
        self.exchanger = Exchanger(
            boot.node_id,
            links,
            ledger,
            boot.c,
            self.timebase,
            timeout=timeout,
            max_timeout=max_timeout,
            recover=recover,
            max_in_flight=max_in_flight,
            hold=hold,
            exact=exact,
            rel_tol=correction_tol,
            horizon=correction_horizon,
        )
        self._idle = asyncio.Event()  # set when nothing of ours is in flight (hold mode)
        self._idle.set()
        self._routes: deque[bytes | None] = deque()  # of the deferred requests, in order
        self.ticks = PoissonClock(links, np.random.default_rng(seed))
        self.stop_requested = asyncio.Event()
        self.final: dict[str, Any] | None = None
        self.late_ticks = 0  # ticks fired after their time (the machine was busy); none dropped
        self._initial = self.exchanger.ledger.initial.tolist()  # constant: converted once
        self._rtt_ms: dict[str, float] = {"p50": 0.0, "p99": 0.0}
        self._rtt_at = -math.inf  # when _rtt_ms was computed (clock seconds)

    def request_stop(self) -> None:
        """Ask the node to stop (idempotent; safe from a signal handler)."""
        self.stop_requested.set()

    def report(self, final: bool = False) -> dict[str, Any]:
        """Return the node's report: the C3 state payload.

        The round-trip percentiles are recomputed at most once a second (and for the final
        report): they sort thousands of samples, which would be most of a report's cost.
        """
        now = self.clock()
        ex = self.exchanger
        t = self.timebase.t(now)
        x, z = ex.ledger.state_values(t)  # plain floats: no arrays to build and convert back
        if final or now - self._rtt_at >= _RTT_EVERY:
            self._rtt_ms, self._rtt_at = ex.rtt_ms(), now
        counters = ex.counters
        return {
            "node": self.boot.node_id,
            "name": self.name,
            "address": self.transport.address,
            "t": t,
            "wall": now,
            "x": x,
            "z": z,
            "initial": list(self._initial),
            "final": final,
            "counters": {name: getattr(counters, name) for name in _COUNTER_NAMES},
            "rtt_ms": dict(self._rtt_ms),
            "edges": {str(peer): n for peer, n in ex.activations().items()},
            "pending": ex.pending,
        }

    async def run(self, mqtt: NodeMqtt | None = None, *, run_mqtt: bool = True) -> int:
        """Gossip until asked to stop, then stop cleanly (see the module header); return 0.

        ``mqtt`` reports the node and publishes its final state; the node runs its connection
        too unless ``run_mqtt`` is False (host mode: one connection runs for all the nodes).
        """
        await self.transport.connect({n.peer_id: n.address for n in self.boot.neighbors})
        # Frames straight from the socket callbacks where the transport can (no queue, future
        # and task switch per frame); the receive task is then only there for its errors.
        self.transport.set_handler(self._on_frame)
        try:
            return await self._run(mqtt, run_mqtt)
        finally:
            self.transport.set_handler(None)

    async def _run(self, mqtt: NodeMqtt | None, run_mqtt: bool) -> int:
        async with asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(self._receive(), name="node-receive"),
                tg.create_task(self._retry(), name="node-retry"),
            ]
            if mqtt is not None and run_mqtt:
                tasks.append(tg.create_task(mqtt.run(), name="node-mqtt"))
            if self.exchanger.recovering:
                tasks.append(tg.create_task(self._recover(), name="node-recover"))
            ticks = tg.create_task(self._tick(), name="node-ticks")
            await self.stop_requested.wait()
            ticks.cancel()
            await self._settle()
            self.exchanger.close()  # from here on the state cannot change
            self.final = self.report(final=True)
            if mqtt is not None:
                await mqtt.publish_final(self.final)
            await asyncio.sleep(self.linger)
            for task in tasks:
                task.cancel()
        return 0

    async def _settle(self) -> None:
        await asyncio.sleep(self.drain)
        ex = self.exchanger
        deadline = self.clock() + max(4 * ex.max_timeout, 5.0)
        released = False
        while self.clock() < deadline:
            if not ex.pending and not released:
                # Nothing of ours is in flight any more: serve what was deferred (its
                # corrections, in exact mode, are then waited for like the rest).
                self._release(force=True)
                released = True
            if not ex.pending and not ex.pending_corrections:
                break
            await asyncio.sleep(0.01)
        self._release(force=True)  # if the deadline came first
        abandoned = ex.abandon_all()
        if abandoned:
            log.warning("%d exchanges still unanswered at stop: counted as failed", abandoned)

    async def _receive(self) -> None:
        # With a transport that hands frames straight to _on_frame (set in run), recv() only
        # ever raises the transport's errors; otherwise frames come through it one by one.
        transport, on_frame = self.transport, self._on_frame
        while True:
            incoming = await transport.recv()
            on_frame(incoming.data, incoming.route, incoming.sender)

    def _on_frame(self, data: bytes, route: bytes | None, sender: int | None = None) -> None:
        """Handle one frame: hand it to the exchanger, send back its answer and what follows.

        ``sender`` is the node id authenticated on the frame's connection (CurveZMQ), if any.
        """
        transport, ex = self.transport, self.exchanger
        answer = ex.receive(data, self.clock(), sender)
        if answer is DEFERRED:
            self._routes.append(route)
        elif answer is not None and route is not None:
            transport.answer(route, answer)
        for out in ex.take_outgoing():  # corrections (exact mode)
            transport.send(out.peer, out.frame)
        if not ex.pending:
            self._idle.set()
            if self._routes:
                self._release()

    def _release(self, force: bool = False) -> None:
        for answer in self.exchanger.release(self.clock(), force=force):
            route = self._routes.popleft()
            if answer is not None and route is not None:
                self.transport.answer(route, answer)
        for out in self.exchanger.take_outgoing():
            self.transport.send(out.peer, out.frame)

    async def _tick(self) -> None:
        transport, ex, clock, tb = self.transport, self.exchanger, self.clock, self.timebase
        t = max(0.0, tb.t(clock()))  # every clock starts at t = 0
        while True:
            t, edge = self.ticks.next_after(t)
            delay = tb.wall(t) - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                # Late (the machine was busy): fire it anyway. Dropping late ticks would thin
                # the clock, and accelerated gossip with fewer activations than its eta
                # assumes diverges (SPEC, MISPRINT 1). Frames are let in between late ticks.
                self.late_ticks += 1
                await asyncio.sleep(0)
            while ex.busy:  # hold mode: one exchange of ours at a time; the tick waits
                self._idle.clear()
                await self._idle.wait()
            out = ex.initiate(edge, clock())
            if out is not None:
                transport.send(out.peer, out.frame)

    async def _retry(self) -> None:
        transport, ex, clock = self.transport, self.exchanger, self.clock
        while True:
            deadline = ex.next_deadline()
            now = clock()
            if deadline is None:
                # A new exchange's deadline is at least one timeout away.
                await asyncio.sleep(ex.timeout)
            elif deadline > now:
                # Not before the grain: most deadlines pass unneeded (the reply came), and a
                # wake-up per exchange would cost more than a retry a few ms late.
                await asyncio.sleep(max(deadline - now, _RETRY_GRAIN))
            else:
                resent = ex.expire(now)
                for out in resent:
                    transport.send(out.peer, out.frame)
                if resent and self._routes:
                    self._release(force=True)  # ours is slow: do not make others wait on it

    async def _recover(self) -> None:
        ex = self.exchanger
        give_up = self.clock() + _RECOVER_GIVE_UP
        while ex.recovering:
            if self.clock() > give_up:
                edges = ex.give_up_recovery()
                log.warning("no ledger from the neighbours on edges %s: gossiping on", edges)
                return
            for out in ex.ledger_requests():
                self.transport.send(out.peer, out.frame)
            resend_at = self.clock() + _RECOVER_EVERY
            while self.clock() < resend_at:
                if not ex.recovering:
                    break
                await asyncio.sleep(0.01)  # replies usually come within a millisecond
        log.info("recovered the ledger from the neighbours")


async def run_node(config: NodeConfig) -> int:
    """Run one node process: register, gossip, stop on command or signal. Async; returns 0.

    A host of one node (:func:`node.host.run_host`). Prints the final report as one JSON
    line on stdout when it stops.

    Raises
    ------
    GossipError
        A bad setting (ConfigError), a refused registration (RemoteError), or a socket
        failure or registration timeout (TransportError).
    """
    from node.host import run_host  # node.host builds on this module

    return await run_host([config])


def run_node_sync(config: NodeConfig) -> int:
    """Run :func:`run_node` in a new event loop (uvloop if installed); return its exit code.

    Raises
    ------
    GossipError
        As :func:`run_node`, in one line (not wrapped in an ExceptionGroup).
    """
    from node.host import run_host_sync

    return run_host_sync([config])
