"""The node daemon: sockets, timers and task lifetimes around the exchange protocol.

All the protocol and all the maths live in :mod:`gossip.exchange.exchanger` and
:mod:`gossip.model.ledger`; this module only feeds them frames and times and carries out what they
return.

Tasks of a running node (one :class:`asyncio.TaskGroup`, every task named):

* ``node-receive`` -- frames in: hand each to the exchanger, send back its answer (or, for a
  request that waits for our own exchange, later), and send the requests it started when an
  answer freed its lock. With the ZeroMQ transport the frames are handled right in its socket
  callbacks (:meth:`Node._on_frame`, ``Transport.set_handler``) and this task only raises the
  transport's errors;
* ``node-ticks``   -- the node's Poisson clock: hand each tick to the exchanger (it starts an
  exchange, or the tick waits for the node's lock); a late tick fires late, none is dropped.
  The ticks themselves are timer callbacks, each arming the next; the task only waits for
  their errors;
* ``node-retry``   -- re-send requests whose timeout passed, start refused activations whose
  back-off pause is over;
* ``node-recover`` -- a restarted node asks its neighbours for their ledgers until recovered,
  each request preceded by its address (``Moved``): it may have come back on another one, and
  a neighbour that gets it sends there from then on (:meth:`Node._follow_moves`); a connection
  that never heard back is dialled again after a second (a joiner's first handshake can come
  before its neighbours know its key);
* ``node-mqtt``    -- reports and the control topic (only with a broker);
* ``node-membership`` -- switches to the membership views the coordinator announces
  (:mod:`node.switchover`).

Stopping (``{"cmd": "stop"}``, SIGTERM, SIGINT): stop initiating (activations still owed are
dropped); keep serving normally for ``drain`` seconds while our own exchanges settle; then close
(new requests get a Nack, repeated ones their cached answer), so the state is final; publish the
final report; keep answering until every neighbour is done with us and knows we are done with
it (:mod:`gossip.exchange.parting`), at most ``linger`` seconds; exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from continuized.gossip.errors import GossipError
from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.trace import Trace, trace_step
from continuized.gossip.exchange.vocabulary import Link, TimeBase
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.model.parameters import ParameterLedger
from continuized.gossip.wire.checks import pack
from continuized.gossip.wire.schema import Bootstrap, Frame
from continuized.node.clock import PoissonClock
from continuized.node.learner import initial_model, learn
from continuized.node.mqtt import NodeMqtt
from continuized.node.problem import exchange_value
from continuized.node.reports import Reports
from continuized.node.switchover import NodeMembership
from continuized.node.transport.interface import Transport
from continuized.node.waits import Alarm, wait_at_most

if TYPE_CHECKING:  # the trainer's imports take seconds: only a training node pays them
    from continuized.gossip.train.minibatch import LocalSgd

__all__ = ["Node"]

log = logging.getLogger(__name__)

_RETRY_GRAIN = 0.01  # seconds; the retry task wakes at most this often (timeouts are longer)
# Seconds within which the idle retry task looks at an exchange that started meanwhile: most
# replies come long before. Looked at on its deadline, each exchange woke the event loop once
# more: 3.5 wake-ups per exchange against 2.7 (strace, a node of line:30 at 600/s), and 0.2
# cores more for 30 nodes. A lost request is re-sent at most this much after its deadline.
_RETRY_LOOK = 0.2
# Seconds the retry task sleeps with nothing pending; an exchange that starts meanwhile wakes it
# at once (Node._wake_retry). Waking every first timeout instead (0.2 s) cost 4,096 idle nodes
# of one machine a whole core.
_IDLE_WAKE = 1.0
_RECOVER_EVERY = 0.5  # seconds between LedgerRequests while recovering
_PART_EVERY = 0.1  # least seconds between goodbyes (Done) to neighbours that have not heard
_PART_GRACE = 4 * _PART_EVERY  # seconds to keep answering goodbyes once parted
_RECOVER_GIVE_UP = 10.0  # seconds before gossiping on without an unresponsive neighbour
# Seconds of unanswered LedgerRequests after which a connection that never heard back is dialled
# again. A joiner asks its new neighbours for ledgers while the view that gives them its key is
# still on its way: a secured neighbour refuses the handshake for good (node.transport.curve),
# and without a new dial the joiner would ask into a dead connection until it gave up.
_REDIAL_AFTER = 2 * _RECOVER_EVERY
_SKEW_EVERY = 1.0  # seconds between two looks at the neighbours' clock offsets


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
        Back-pressure: see :class:`gossip.exchange.exchanger.Exchanger`.
    clock : callable() -> float
        Unix time in seconds.
    problem : LocalProblem or None
        An optimization run's own problem (:mod:`node.problem`): the ledger then holds the
        dual pair ``(y, z)``, the node exchanges ``grad f^*(y)`` and reports the primal.
    learner : LocalSgd or None
        A training run's local optimizer (:mod:`node.learner`): the ledger then holds the
        model's parameters in arrays (:class:`~gossip.model.parameters.ParameterLedger`), a
        gradient clock of rate 1 per unit of t steps them, and each node takes part in
        ``boot.rate_com`` exchanges per unit of t (none for ``local``).
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
        linger: float = 10.0,
        seed: int | None = None,
        recover: bool | None = None,
        max_in_flight: int | None = None,
        clock: Callable[[], float] = time.time,
        problem: Any = None,
        learner: LocalSgd | None = None,
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
        self.restarted = recover  # a node back in a running cluster (not one that came late)
        links = [Link(n.edge_index, n.peer_id, n.prob, n.step) for n in boot.neighbors]
        # Optimization: the dual pair (y, z) starts at 0 whatever the node's data (the paper's
        # Section 7).
        initial: Any = boot.initial_value if problem is None else [0.0] * boot.dim
        if learner is not None:  # a model: its own draw, unless the Bootstrap carries it
            initial = initial_model(boot, learner)
        edges = [link.edge for link in links]
        ledger = (
            Ledger(initial, edges, eta=boot.eta)
            if learner is None
            else ParameterLedger(initial, edges, eta=boot.eta)
        )
        self.problem = problem
        self.learner = learner
        self.primal = None if problem is None else exchange_value(problem)
        """Optimization: the primal ``x = grad f_v^*(y)`` of the ledger's dual (reports)."""
        extra: dict[str, Any] = {}
        if problem is not None:
            extra["exchange_value"] = problem.grad_conjugate
        # Exact samples on a grid of t for the coordinator's exact curve: of x when averaging,
        # of the dual y when optimizing (the coordinator turns them into x = grad f_v^*(y)).
        start = max(0.0, self.timebase.t(clock())) if recover else 0.0
        # A model's samples are d floats each: one per report period, no more.
        step = (
            trace_step(boot.rate, boot.metrics_period, max(1, boot.n))
            if learner is None
            else boot.rate * boot.metrics_period
        )
        extra["trace"] = Trace(step, start)
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
            rng=None if seed is None else seed + 1,  # back-off pauses: not the clock's stream
            **extra,
        )
        self.seed = seed
        # Training: each edge fires at P_e n rate_com / 2 per unit of t (gossip.train.clocks),
        # half of it at each end; gossip: at P_e.
        share = 0.5 if learner is None else 0.25 * boot.n * boot.rate_com
        self.ticks = PoissonClock(links, np.random.default_rng(seed), share=share)
        self.communicates = learner is None or boot.algorithm != "local"
        self.gradient_steps = 0
        self.membership = NodeMembership(self)  # membership views: node.switchover
        self.stop_requested = asyncio.Event()
        # Rung when a Busy queued an activation to start later, and when an exchange starts
        # while the retry task sleeps with nothing pending (_retry_idle).
        self._retry_alarm = Alarm()
        self._retry_idle = False
        self._retry_looking = False  # the idle retry task's timer was moved (_wake_retry)
        self._lazy = self.exchanger.ledger.lazy  # a booking leaves work for settle()
        self._parted = asyncio.Event()  # set when, stopping, every neighbour said goodbye
        self.final: dict[str, Any] | None = None
        self.final_taken: asyncio.Event | None = None  # set once the coordinator holds it
        self.on_final: Callable[[], None] | None = None  # called once ``final`` is there
        self.late_ticks = 0  # ticks fired after their time (the machine was busy); none dropped
        # Constant: converted once (a model's, packed).
        self.reports = Reports(
            self, self.exchanger.ledger.initial.tolist() if learner is None else pack(initial)
        )
        self._skew_at = -math.inf  # when the neighbours' clock offsets were last looked at
        self.skew_warning = ""
        """The clock-skew warning this node gave ('' while none): given once per run."""

    def request_stop(self) -> None:
        """Ask the node to stop (idempotent; safe from a signal handler)."""
        self.stop_requested.set()

    def report(self, final: bool = False) -> dict[str, Any]:
        """Return the node's report: the C3 state payload (:class:`node.reports.Reports`)."""
        return self.reports.report(final)

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
            tasks.append(tg.create_task(self.membership.run(), name="node-membership"))
            clocks = []
            if self.communicates:
                clocks.append(tg.create_task(self._tick(), name="node-ticks"))
            if self.learner is not None:
                clocks.append(tg.create_task(learn(self, self.learner), name="node-gradients"))
            await self.stop_requested.wait()
            for clock in clocks:
                clock.cancel()
            await self._settle()
            self.exchanger.close()  # from here on the state cannot change
            self._send_released()  # requests that waited for us: Nacked
            if not self.skew_warning:  # a run shorter than a look: its exchanges say it now
                self._check_skew()
            self.final = self.report(final=True)
            if self.on_final is not None:
                self.on_final()
            if mqtt is not None:
                await self._publish_final(mqtt, self.final)
            await self._part()
            if mqtt is not None and run_mqtt:
                mqtt.stop()  # a cancel alone can be lost: node.mqtt
            for task in tasks:
                task.cancel()
        return 0

    async def _publish_final(self, mqtt: NodeMqtt, final: dict[str, Any]) -> None:
        """Publish the final report on MQTT; with the broker away, only until the coordinator
        holds it by the other way (``final_taken``, :mod:`node.lifeline`): a broker lost for
        good would hold the stop for the whole retry window."""
        taken = self.final_taken
        if taken is None or mqtt.lost_for() == 0.0:
            await mqtt.publish_final(final)
            return
        async with asyncio.TaskGroup() as tg:
            publish = tg.create_task(mqtt.publish_final(final), name="node-final-mqtt")
            took = tg.create_task(taken.wait(), name="node-final-taken")
            await asyncio.wait({publish, took}, return_when=asyncio.FIRST_COMPLETED)
            publish.cancel()
            took.cancel()

    async def _settle(self) -> None:
        ex = self.exchanger
        ex.stop_initiating()
        await asyncio.sleep(self.drain)
        deadline = self.clock() + max(4 * ex.max_timeout, 5.0)
        while self.clock() < deadline:
            if not ex.pending:
                break
            await asyncio.sleep(0.01)
        abandoned = ex.abandon_all()
        if abandoned:
            log.warning("%d exchanges still unanswered at stop: counted as failed", abandoned)

    async def _part(self) -> None:
        """Answer repeated requests until the neighbours are done with us (the rule of
        :mod:`gossip.exchange.parting`), for at most ``linger`` seconds (a dead one never says
        so)."""
        ex, transport = self.exchanger, self.transport
        deadline = self.clock() + self.linger
        while not ex.parting.parted and self.clock() < deadline:
            for out in ex.parting.goodbyes():
                transport.send(out.peer, out.frame)
            # Not faster than a retry of an exchange would be: a thousand nodes in one
            # process must not flood each other with goodbyes.
            await wait_at_most(self._parted, max(_PART_EVERY, ex.current_timeout()))
        if not ex.parting.parted:
            log.warning("stopped without every neighbour's goodbye (after %.1f s)", self.linger)
            return
        # Our last answer to a goodbye may be lost, and its sender re-sends: answer a few more
        # (or it waits for its own deadline: slower, never wrong).
        await asyncio.sleep(min(_PART_GRACE, max(0.0, deadline - self.clock())))

    async def _receive(self) -> None:
        # With a transport that hands frames straight to _on_frame (set in run), recv() only
        # ever raises the transport's errors; otherwise frames come through it one by one.
        transport, on_frame = self.transport, self._on_frame
        while True:
            incoming = await transport.recv()
            on_frame(incoming.data, incoming.route, incoming.sender)

    def _on_frame(self, data: Frame, route: bytes | None, sender: int | None = None) -> None:
        """Handle one frame: hand it to the exchanger, send back its answer and what follows.

        ``sender`` is the node id authenticated on the frame's connection (CurveZMQ), if any.
        """
        transport, ex = self.transport, self.exchanger
        bounced = ex.counters.bounced
        answer = ex.receive(data, self.clock(), route, sender)
        if ex.recovery.moved:  # a restarted neighbour announced its address
            self._follow_moves()
        if answer and route is not None:  # b"" (DEFERRED): answered later
            transport.answer(route, answer)
        for out in ex.take_outgoing():  # waiting ticks, started once our lock is free
            transport.send(out.peer, out.frame)
        self._send_released()
        if ex.counters.bounced != bounced:
            self._retry_alarm.ring()  # a refused activation to start after a pause: re-arm
        else:
            self._wake_retry()
        if not ex.open and ex.parting.parted:
            self._parted.set()
        # The ledger's deferred arithmetic, once the answer has left: done now, it would hold
        # a model's frame back on a node with one core (node.transport.departures).
        if self._lazy:
            transport.when_sent(ex.settle)

    def _follow_moves(self) -> None:
        """Send to each neighbour that announced another address there from now on."""
        ex = self.exchanger
        for peer, address in ex.recovery.take_moved().items():
            try:
                moved = self.transport.move(peer, address)
            except GossipError as exc:  # unreachable address, or no key for the peer
                ex.counters.rejected += 1
                log.warning("neighbour %d announced address %r: %s", peer, address, exc)
                continue
            if moved:
                ex.counters.moved += 1
                log.info("neighbour %d is now at %s", peer, address)

    async def _tick(self) -> None:
        """Run the node's Poisson clock until cancelled; raise what a tick raised.

        Each tick is a timer callback (:meth:`_on_tick`) that arms the next one: a task
        resumed per tick costs a future and a task step more, on the path of every exchange.
        """
        loop = asyncio.get_running_loop()
        failed: asyncio.Future[None] = loop.create_future()
        timer: asyncio.TimerHandle | None = None

        def arm(after: float) -> None:
            nonlocal timer
            t, edge = self.ticks.next_after(after)
            delay = self.timebase.wall(t) - self.clock()
            if delay <= 0:
                # Late (the machine was busy): fire it anyway, but after the frames already
                # read (a callback called soon runs at the loop's next turn). Dropping late
                # ticks would thin the clock, and accelerated gossip with fewer activations
                # than its eta assumes diverges (the paper's Section 6 misprints the rate).
                self.late_ticks += 1
            timer = loop.call_later(max(delay, 0.0), fire, t, edge)

        def fire(t: float, edge: int) -> None:
            try:
                self._on_tick(t, edge)
                arm(t)
            except Exception as exc:  # a loop callback's error would only be logged
                if not failed.done():
                    failed.set_exception(exc)

        arm(max(0.0, self.timebase.t(self.clock())))  # every clock starts at t = 0
        try:
            await failed
        finally:
            if timer is not None:
                timer.cancel()

    def _on_tick(self, t: float, edge: int) -> None:
        """Hand the tick of ``edge`` due at ``t`` to the exchanger; send what it starts."""
        out = self.exchanger.initiate(edge, self.clock(), t)  # None: it waits, or is skipped
        if out is not None:
            self.transport.send(out.peer, out.frame)
            self._wake_retry()
            if self._lazy:
                self.transport.when_sent(self.exchanger.settle)  # once the request has left

    async def _retry(self) -> None:
        transport, ex, clock = self.transport, self.exchanger, self.clock
        while True:
            deadline, start, now = ex.next_deadline(), ex.next_start(), clock()
            if now >= self._skew_at and not self.skew_warning:
                self._skew_at = now + _SKEW_EVERY
                self._check_skew()
            if (deadline is not None and deadline <= now) or (start is not None and start <= now):
                due = ex.expire(now)
                for peer in ex.take_silent():  # before the re-sends: they take the new way
                    if transport.redial(peer):
                        log.info("neighbour %d never answered on this connection: redialled", peer)
                for out in due:
                    transport.send(out.peer, out.frame)
                self._send_released()  # a stuck exchange released the lock
                continue
            # A retry deadline no sooner than the grain: most pass unneeded (the reply came),
            # and a wake-up per exchange would cost more than a retry a few ms late. A pause
            # after a refusal is short (about a round trip) and delays a jump: on time.
            if deadline is None and start is None:  # what starts now rings us (_wake_retry)
                self._retry_idle = True
                wake = now + _IDLE_WAKE
            else:
                wake = now + _IDLE_WAKE if deadline is None else max(deadline, now + _RETRY_GRAIN)
                if start is not None:
                    wake = min(wake, start)
            await self._retry_alarm.sleep(wake - now)  # or less: a Busy may set an earlier pause
            self._retry_idle = self._retry_looking = False

    def _wake_retry(self) -> None:
        """Have the retry task, if it sleeps with nothing pending, look within
        :data:`_RETRY_LOOK` at what started meanwhile (a request sent, a request deferred): its
        timer moves, nothing runs now. Once per sleep: a later deadline is later still. (A pause
        after a refusal, which may end sooner, rings the task instead.)"""
        if self._retry_idle and not self._retry_looking:
            self._retry_looking = True
            self._retry_alarm.wake_by(_RETRY_LOOK)

    def _check_skew(self) -> None:
        """Warn, once, when a neighbour's clock is surely past what the shared t tolerates."""
        self.skew_warning = self.reports.skew_warning()
        if self.skew_warning:
            log.warning("%s", self.skew_warning)

    def _send_released(self) -> None:
        """Answer the requests that waited for our exchange, now that it settled."""
        for route, answer in self.exchanger.take_released():
            if route is not None:
                self.transport.answer(route, answer)

    async def _recover(self) -> None:
        ex, address, transport = self.exchanger, self.transport.address, self.transport
        started = self.clock()
        give_up = started + _RECOVER_GIVE_UP
        while ex.recovering:
            if self.clock() > give_up:
                edges = ex.recovery.give_up_recovery()
                log.warning("no ledger from the neighbours on edges %s: gossiping on", edges)
                break
            outs = ex.recovery.ledger_requests(address)
            if self.clock() - started >= _REDIAL_AFTER:
                for peer in sorted({out.peer for out in outs}):  # before the sends: the new way
                    if transport.redial(peer):
                        log.info("neighbour %d silent on this connection: redialled", peer)
            for out in outs:
                transport.send(out.peer, out.frame)
            resend_at = self.clock() + _RECOVER_EVERY
            while self.clock() < resend_at:
                if not ex.recovering:
                    break
                await asyncio.sleep(0.01)  # replies usually come within a millisecond
        else:
            log.info("recovered the ledger from the neighbours")
        # A neighbour whose Moved was lost (its LedgerRequest was not) would send to our old
        # address for good: announce it until each neighbour's requests reach us here.
        give_up = self.clock() + _RECOVER_GIVE_UP
        while ex.recovery.announcing and self.clock() < give_up:
            for out in ex.recovery.announcements(address):
                self.transport.send(out.peer, out.frame)
            await asyncio.sleep(_RECOVER_EVERY)
