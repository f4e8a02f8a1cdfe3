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
dropped); keep serving normally for
``drain`` seconds while our own exchanges settle; then close (new requests get a Nack, repeated
ones their cached answer), so the state is final; publish the final report; keep answering
until every neighbour is done with us and knows we are done with it
(:mod:`gossip.exchange.parting`), at most ``linger`` seconds; exit 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from gossip.errors import GossipError
from gossip.exchange.clockskew import SKEW_SAMPLES, skew_tolerance
from gossip.exchange.exchanger import Exchanger
from gossip.exchange.trace import Trace, trace_step
from gossip.exchange.vocabulary import Counters, Link, TimeBase
from gossip.model.ledger import Ledger
from gossip.model.parameters import ParameterLedger
from gossip.wire.checks import pack
from gossip.wire.schema import Bootstrap, Frame
from node.clock import PoissonClock
from node.learner import initial_model
from node.mqtt import NodeMqtt
from node.problem import exchange_value
from node.switchover import NodeMembership
from node.transport.interface import Transport
from node.waits import Alarm, wait_at_most

if TYPE_CHECKING:  # the trainer's imports take seconds: only a training node pays them
    from gossip.train.minibatch import LocalSgd

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
# again. A joiner registers, dials its new neighbours and asks them for ledgers at once, while
# the view command that gives them its key is still on its way: a secured neighbour then refuses
# the handshake, for good (node.transport.curve), and without a new dial the joiner would ask into
# a dead connection until it gave up, then start exchanges that only a redial, seconds later,
# delivers.
_REDIAL_AFTER = 2 * _RECOVER_EVERY
# Seconds between two computations of the round-trip percentiles in the periodic reports: they
# partition thousands of samples (gossip.exchange.recent; the costliest part of a report), and move
# slowly.
_RTT_EVERY = 1.0
# Seconds between two looks at a gradient step that waits for our exchange to settle.
_STEP_WAIT = 0.002
_SKEW_EVERY = 1.0  # seconds between two looks at the neighbours' clock offsets
_COUNTER_NAMES = tuple(f.name for f in dataclasses.fields(Counters))  # asdict() is slow
_UNKNOWN: dict[str, float | None] = {"p50": None, "p99": None}  # percentiles of no sample


def _known(percentiles: dict[str, float], samples: int) -> dict[str, float | None]:
    """``percentiles`` if taken from some sample, else unknown (JSON null, never 0)."""
    return dict(percentiles) if samples else dict.fromkeys(percentiles)


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
        self._primal = None if problem is None else exchange_value(problem)
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
        self._initial: str | list[float] = (
            self.exchanger.ledger.initial.tolist() if learner is None else pack(initial)
        )
        self._rtt_ms: dict[str, float | None] = dict(_UNKNOWN)
        self._lag: dict[str, float | None] = dict(_UNKNOWN)
        self._wait: dict[str, float | None] = dict(_UNKNOWN)
        self._rtt_at = -math.inf  # when _rtt_ms and _lag were computed (clock seconds)
        self._skew_at = -math.inf  # when the neighbours' clock offsets were last looked at
        self.skew_warning = ""
        """The clock-skew warning this node gave ('' while none): given once per run."""

    def request_stop(self) -> None:
        """Ask the node to stop (idempotent; safe from a signal handler)."""
        self.stop_requested.set()

    def report(self, final: bool = False) -> dict[str, Any]:
        """Return the node's report: the C3 state payload.

        The round-trip and lag percentiles are recomputed at most once a second (and for the
        final report): they partition thousands of samples, most of a report's cost. A model's
        parameters (``x``, ``z``, ``initial`` and each trace sample's) go as base64 text
        (:func:`gossip.wire.checks.pack`): as a list of numbers it takes 2 times the bytes, and far
        more time. ``clock`` is the bound on the neighbour's clock offset surely the largest
        (:meth:`_clock_report`), the coordinator's evidence of skew.
        """
        now = self.clock()
        ex = self.exchanger
        t = self.timebase.t(now)
        # Plain floats: no arrays to build and convert back.
        x, z = cast("tuple[Any, Any]", ex.ledger.state_values(t))
        if isinstance(x, np.ndarray):  # a model's parameters (training)
            x, z = pack(x), pack(z)
        if final or now - self._rtt_at >= _RTT_EVERY:
            rtts, lags = ex.measured()
            # Nothing measured is unknown (null), not 0: a summary must not take the report of
            # a node that has completed none of its own exchanges for a 0 ms round trip.
            self._rtt_ms = _known(ex.rtt_ms(), rtts)
            self._lag, self._wait = _known(ex.lag(), lags), _known(ex.wait(), lags)
            self._rtt_at = now
        counters = ex.counters
        extra: dict[str, Any] = {}
        if self._primal is not None:  # optimization: the ledger's pair is the dual (y, z)
            extra["y"] = x
            x = self._primal(x)
        return {
            **extra,
            "node": self.boot.node_id,
            "name": self.name,
            "address": self.transport.address,
            "t": t,
            "wall": now,
            "x": x,
            "z": z,
            "initial": self._initial if isinstance(self._initial, str) else list(self._initial),
            "final": final,
            "counters": {name: getattr(counters, name) for name in _COUNTER_NAMES},
            "rtt_ms": dict(self._rtt_ms),
            "clock": self._clock_report(),
            "lag": dict(self._lag),
            "wait": dict(self._wait),
            "edges": {str(peer): n for peer, n in ex.activations().items()},
            "pending": ex.pending,
            "gradient_steps": self.gradient_steps,
            "waiting": ex.waiting,
            "trace": self._trace(t, final),
        }

    def _trace(self, t: float, final: bool) -> list[list[Any]]:
        trace = self.exchanger.trace
        if trace is None:
            return []
        if final:  # closed and settled: no jump will come, every grid time up to t is final
            trace.finish(self.exchanger.ledger, t)
        samples = trace.take()
        if self.learner is not None:  # a model's: [g, x as base64] (gossip.wire.checks)
            return [[row[0], pack(row[1:])] for row in samples]
        return samples

    def _clock_report(self) -> dict[str, Any] | None:
        """The neighbour whose clock offset is surely the largest, as the report carries it:
        ``peer``, ``offset`` (its clock less ours) and ``error`` (the bound's half-width), in
        seconds, and ``samples``; ``None`` before a first stamped reply."""
        worst = self.exchanger.clock_offsets().worst()
        if worst is None:
            return None
        peer, est = worst
        return {"peer": peer, "offset": est.offset, "error": est.error, "samples": est.samples}

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
                clocks.append(tg.create_task(self._learn(self.learner), name="node-gradients"))
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

    async def _learn(self, learner: LocalSgd) -> None:
        """Run the node's gradient clock until cancelled; raise what a step raised.

        A step at t reads x(t) from the ledger and moves x and z by the same ``-lr
        direction`` (:meth:`~gossip.model.parameters.ParameterLedger.add_local`); the trace
        reads its grid times before t first, as before a jump. As with the
        exchange ticks, a late step is taken late, never dropped: the node's stream of
        mini-batches stays the simulator's.
        """
        from gossip.train.minibatch import gradient_times

        ledger = self.exchanger.ledger
        assert isinstance(ledger, ParameterLedger)
        loop = asyncio.get_running_loop()
        failed: asyncio.Future[None] = loop.create_future()
        times = gradient_times(self.boot.seed, self.boot.node_id)
        timer: asyncio.TimerHandle | None = None
        # A restarted node does not take the steps before it came back (its state comes from its
        # neighbours' ledgers); a fresh node whose model loaded after t = 0 takes its first
        # steps late, at once, as the simulator's node took them.
        now_t = max(0.0, self.timebase.t(self.clock())) if self.restarted else 0.0
        t = next(times)
        while t < now_t:
            t = next(times)

        def arm(t: float) -> None:
            nonlocal timer
            delay = self.timebase.wall(t) - self.clock()
            timer = loop.call_later(max(delay, 0.0), fire, t)

        def fire(t: float) -> None:
            nonlocal timer
            try:
                ex = self.exchanger
                if ex.open and ex.pending:
                    # A jump of ours is on its way, and may fall before t: the step waits for
                    # it (a round trip at most), so that it sees x(t) with every jump before
                    # t, and the trace's grid times stay exact.
                    timer = loop.call_later(_STEP_WAIT, fire, t)
                    return
                if ex.open:
                    # A step fired late, after a jump at a later time, is taken at that jump's
                    # time: the node's history stays in time order, as for a late exchange.
                    at = max(t, ex.last_jump_time)
                    moves = learner.sgd.lr > 0  # lr 0: the batch is drawn, nothing moves
                    if moves and ex.trace is not None:  # grid times before the step: final
                        ex.trace.before_jump(ledger, at)
                    x, _ = ledger.state_values(at)
                    step = learner.step(x)
                    if moves:
                        ledger.add_local(step)
                    self.gradient_steps += 1
                arm(next(times))
            except Exception as exc:  # a loop callback's error would only be logged
                if not failed.done():
                    failed.set_exception(exc)

        arm(t)
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
        """Warn, once, when a neighbour's clock is surely past what the shared t tolerates
        (the bound of :mod:`gossip.exchange.clockskew`, from this node's own exchanges)."""
        worst = self.exchanger.clock_offsets().worst()
        if worst is None:
            return
        peer, est = worst
        n = max(self.boot.n, 2)
        tolerance = skew_tolerance(n, self.boot.rate)
        if est.samples < SKEW_SAMPLES or not est.past(tolerance):
            return
        side = "behind" if est.offset > 0 else "ahead of"
        self.skew_warning = (
            f"{self.name} (node {self.boot.node_id}): this host's clock is "
            f"{abs(est.offset) * 1e3:.1f} ms {side} neighbour {peer}'s (+-{est.error * 1e3:.1f} "
            f"ms, from {est.samples} exchanges' round trips), past the {tolerance * 1e3:.1f} ms "
            f"the shared t tolerates at {self.boot.rate:g}/s on {n} nodes: synchronise the "
            "hosts' clocks (chrony; `chronyc tracking` shows a host's offset) or lower --rate"
        )
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
