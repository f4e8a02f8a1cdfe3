"""The node's lifeline to its coordinator: the CURVE channel it registered on, kept after the
bootstrap so that a run can end without the broker.

Once bootstrapped, a node sends a :class:`~gossip.wire.schema.Beat` to the coordinator's
registration socket every :data:`BEAT_EVERY` seconds, on a DEALER of its own (secured: the
node's CURVE key pair, the coordinator's key checked, as at registration). The coordinator
echoes it while the run goes on, and answers a :class:`~gossip.wire.schema.Stop` once it is
over: the node then stops as on ``{"cmd": "stop"}``. A stopped node puts its final report in its
beats until the coordinator says it took it, so the final states reach the coordinator even
when the broker is gone for good (``gossip coordinator --broker-deadline``). A final report
past what a beat's frame carries (a large model's parameters, :data:`FINAL_ROOM`) goes over
MQTT only: its beats carry none but say so (``final_over_mqtt``), and the coordinator answers
one "taken" once it holds the report from MQTT; the node's log says so once.

The nodes of a host process that registered together (:mod:`node.host`) beat together: a
:class:`LifelineGroup` sends all their beats in one :class:`~gossip.wire.schema.BeatBatch` on
one socket (secured: one CURVE connection, on the key the batch registered with), so the
coordinator serves one message a second per process, not per node; each node keeps its own
:class:`Lifeline` state and rule.

The rule this module enforces: **a node that hears neither its broker nor its coordinator for
``orphan_after`` seconds stops by itself** (a clean stop: final report, goodbyes, exit 0), with
a warning that says so. Nobody is left who could stop it or measure it; without the rule the
process would gossip on forever. A node with no broker counts its broker as lost from the
start. One of the two suffices to keep the node: a coordinator restarted on the same address,
or a broker back with the retained status, keeps the run going as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import zmq
import zmq.asyncio

from continuized.gossip.errors import ProtocolError
from continuized.gossip.wire.schema import (
    MAX_FRAME,
    Beat,
    BeatBatch,
    Message,
    RegisterError,
    Stop,
    decode,
    encode_bytes,
)
from continuized.node.transport.curve import CurveKeys, curve_client
from continuized.node.waits import wait_at_most

__all__ = ["BEAT_EVERY", "FINAL_ROOM", "TAKEN", "Lifeline", "LifelineGroup"]

log = logging.getLogger(__name__)

BEAT_EVERY = 1.0
"""Seconds between two beats (and between two tries of the final report)."""

TAKEN = Beat.TAKEN
"""The ``final`` of the coordinator's echo once it holds this node's final report."""

FINAL_ROOM = MAX_FRAME - 4096
"""Largest final report a beat carries, in bytes of JSON: the coordinator refuses a frame past
:data:`~gossip.wire.schema.MAX_FRAME`, and the beat's other fields fit in the rest. (A model
of more than about 24,000 to 32,000 parameters reports past it: x, z, the initial model and
perhaps a trace sample, each 10.7 bytes a parameter, :func:`gossip.wire.checks.pack`.)"""

_POLL = 0.1  # seconds: how often a stopped process checks that its final reports were taken
_QUEUED = 2  # beats a lifeline keeps for a coordinator that is away


def _until(next_beat: float, now: float, orphan_after: float | None) -> float:
    """Seconds the beats may wait: until the next beat, and a quarter of ``orphan_after`` at
    most (so that the orphan rule acts within a quarter of its time)."""
    wait = max(0.0, next_beat - now)
    if orphan_after is not None and math.isfinite(orphan_after):
        wait = min(wait, orphan_after / 4)
    return wait


def _socket(
    context: zmq.asyncio.Context | None, keys: CurveKeys | None, coordinator_key: str
) -> zmq.asyncio.Socket:
    """The DEALER a lifeline beats on (secured with ``keys`` when given)."""
    sock = (context or zmq.asyncio.Context.instance()).socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    # While the coordinator is away, at most _QUEUED beats wait for it: a restarted one gets no
    # burst of stale beats with a final report behind them. Not ZMQ_IMMEDIATE, which would
    # have done that too, but which drops what the coordinator answered and the node had not
    # read yet when the coordinator closes: the answer to the last final report was lost so,
    # and its node waited for it in vain.
    sock.setsockopt(zmq.SNDHWM, _QUEUED)
    if keys is not None:
        curve_client(sock, keys, coordinator_key)
    return sock


class Lifeline:
    """One node's beats to the coordinator at ``coordinator`` (see the module docstring).

    Parameters
    ----------
    coordinator : str
        The coordinator's registration address, ``tcp://host:5555``.
    name : str
        The node's name (secured: its key's).
    epoch : float
        The run's epoch (from the bootstrap): beats and stops name the run.
    on_stop : callable()
        Called once when the coordinator says the run is over, or when the node is orphaned.
    final : callable() -> dict or None
        The node's final report, ``None`` until it stopped.
    broker_lost_for : callable() -> float
        Seconds since the broker was last connected (``math.inf``: no broker, never was).
    orphan_after : float or None
        Seconds without broker and coordinator after which the node stops (``None``: never).
    context, keys, coordinator_key :
        The ZeroMQ context; the node's CURVE key pair and the coordinator's public key
        (secured runs, as :func:`node.registration.register` takes them).
    """

    def __init__(
        self,
        coordinator: str,
        name: str,
        epoch: float,
        on_stop: Callable[[], None],
        final: Callable[[], dict[str, Any] | None],
        broker_lost_for: Callable[[], float],
        *,
        orphan_after: float | None = None,
        context: zmq.asyncio.Context | None = None,
        keys: CurveKeys | None = None,
        coordinator_key: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.coordinator = coordinator
        self.name = name
        self.epoch = epoch
        self.on_stop = on_stop
        self.final = final
        self.broker_lost_for = broker_lost_for
        self.orphan_after = orphan_after
        self._context = context
        self._keys = keys
        self._coordinator_key = coordinator_key
        self._clock = clock
        self.heard = clock()
        """When the coordinator last answered (monotonic seconds; the bootstrap counts)."""
        self.delivered = asyncio.Event()
        """Set once the coordinator holds the final report."""
        self.answered = False
        """Whether the coordinator ever answered a beat (one that predates beats never does)."""
        self.stopped_by = ""  # "coordinator" or "orphaned", once this lifeline stopped the node
        self._final_text: str | None = None  # the final report's JSON, once encoded
        self._over_mqtt = False  # the final report is past FINAL_ROOM: it went over MQTT only
        self._flag_refused = False  # the coordinator refused a beat that said so (an older one)
        self._sent_final = False  # the last beat sent carried the final report (or its flag)
        self._wake = asyncio.Event()  # set by kick(): a final report to send, or delivered

    def kick(self) -> None:
        """Have the beats look at the node now (its final report is there): they otherwise
        wait for the next beat, without a wake-up in between."""
        self._wake.set()

    def share_wake(self, wake: asyncio.Event) -> None:
        """Kick ``wake`` instead of this lifeline's own (a :class:`LifelineGroup`'s)."""
        self._wake = wake

    def final_text(self) -> str:
        """The final report as a beat carries it: its JSON, encoded once (a report never
        changes); ``""`` before the stop, and for a report past :data:`FINAL_ROOM` bytes,
        which then goes over MQTT only (said once)."""
        if self._final_text is None:
            final = self.final()
            if final is None:
                return ""
            text = json.dumps(final)
            if len(text) > FINAL_ROOM:
                log.warning(
                    "the final report (%d bytes) is past the %d a beat carries: it goes to the "
                    "coordinator over MQTT only",
                    len(text),
                    FINAL_ROOM,
                )
                text = ""
            self._over_mqtt = not text
            self._final_text = text
        return self._final_text

    def final_over_mqtt(self) -> bool:
        """Whether the node stopped and its final report went over MQTT only (past
        :data:`FINAL_ROOM` bytes): its beats then say so, ``Beat.final_over_mqtt``."""
        self.final_text()
        return self._over_mqtt and not self._flag_refused

    def stopped(self) -> bool:
        """Whether the node's beats now end its run: they carry its final report, or say it
        went over MQTT only. The coordinator's ``"taken"`` answers only such a beat."""
        return bool(self.final_text()) or self.final_over_mqtt()

    def beat(self) -> Beat:
        """The node's beat now (see :meth:`stopped`)."""
        return Beat(self.name, self.epoch, self.final_text(), self.final_over_mqtt())

    def awaits_taken(self) -> bool:
        """Whether the node's process waits for the coordinator's ``"taken"`` before it exits:
        the coordinator answered a beat, and the node's beats end its run (not an older
        coordinator's, which refused a beat that said the report went over MQTT only)."""
        return self.answered and self.stopped()

    async def wait_taken(self) -> None:
        """Wait until the coordinator holds the final report, while :meth:`awaits_taken`."""
        while self.awaits_taken() and not self.delivered.is_set():
            # Polled: an older coordinator's refusal of the flag ends the wait too.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_POLL):
                    await self.delivered.wait()

    def coordinator_lost_for(self) -> float:
        """Seconds since the coordinator last answered a beat."""
        return self._clock() - self.heard

    def orphaned(self) -> bool:
        """Whether the node heard neither broker nor coordinator for ``orphan_after`` s."""
        limit = self.orphan_after
        if limit is None:
            return False
        return self.coordinator_lost_for() > limit and self.broker_lost_for() > limit

    async def run(self) -> None:
        """Beat until the coordinator holds the final report, or until cancelled."""
        sock = _socket(self._context, self._keys, self._coordinator_key)
        try:
            sock.connect(self.coordinator)
            await self._beat(sock)
        finally:
            sock.close(0)

    async def _beat(self, sock: zmq.asyncio.Socket) -> None:
        # The answers are read by a task of their own and the beats wait on an event with a
        # timeout: a poll of the socket every 0.1 s (zmq.asyncio's poll registers and removes
        # the socket's FD each time) cost 30 idle node processes 0.13 cores of their 0.28.
        receiving = asyncio.ensure_future(self._receive(sock))
        try:
            next_beat = -math.inf
            while not self.delivered.is_set():
                now = self._clock()
                stopped = self.stopped()
                if now >= next_beat or (stopped and not self._sent_final):
                    with contextlib.suppress(zmq.Again):  # no connection now: the next beat
                        await sock.send(encode_bytes(self.beat()), zmq.NOBLOCK)
                    self._sent_final = stopped
                    next_beat = now + BEAT_EVERY
                self.stop_if_orphaned()
                self._wake.clear()
                await wait_at_most(self._wake, _until(next_beat, self._clock(), self.orphan_after))
                if receiving.done():
                    receiving.result()  # the socket failed: raise it here, as a read would
        finally:
            receiving.cancel()

    async def _receive(self, sock: zmq.asyncio.Socket) -> None:
        while True:
            self._answer(await sock.recv(), sent_final=self._sent_final)

    def stop_if_orphaned(self) -> None:
        """Stop the node, with a warning, once :meth:`orphaned` (only once)."""
        if self.stopped_by == "" and self.orphaned():
            self.stopped_by = "orphaned"
            lost = self.broker_lost_for()
            broker = "no broker" if math.isinf(lost) else f"no broker for {lost:.0f} s"
            log.warning(
                "%s and no coordinator for %.0f s (over --orphan-after %g s): nobody can stop "
                "or measure this node any more, so it stops",
                broker,
                self.coordinator_lost_for(),
                self.orphan_after,
            )
            self.on_stop()

    def refused(self, message: RegisterError, sent_final: bool) -> None:
        """Take the coordinator's refusal of a beat (``sent_final``: one that ended the run)."""
        if sent_final and self.final_over_mqtt():
            # A coordinator that predates final_over_mqtt refuses the field: beat as to it
            # (no flag), and do not wait for a "taken" it cannot say.
            self._flag_refused = True
            log.info("the coordinator refused a beat that said the final report went over MQTT")
            return
        log.warning("the coordinator refused a beat: %s", message.reason)

    def _answer(self, frame: bytes, sent_final: bool) -> None:
        try:
            message = decode(frame)
        except ProtocolError as exc:
            log.debug("ignored an answer to a beat: %s", exc)
            return
        self.take(message, sent_final)

    def take(self, message: Message, sent_final: bool) -> None:
        """Take the coordinator's answer to a beat (``sent_final``: one with the final report)."""
        if isinstance(message, RegisterError):
            self.refused(message, sent_final)
            return
        if not isinstance(message, Beat | Stop) or abs(message.epoch - self.epoch) > 1e-6:
            return  # another run's coordinator: not ours, not heard
        self.heard = self._clock()
        self.answered = True
        if isinstance(message, Stop) and self.stopped_by == "":
            self.stopped_by = "coordinator"
            log.info("the coordinator stopped the run (%s) over its own channel", message.reason)
            self.on_stop()
        elif isinstance(message, Beat) and message.final == TAKEN and sent_final:
            log.info("the coordinator took the final report over its own channel")
            self.delivered.set()
            self.kick()  # the beats end


class LifelineGroup:
    """The lifelines of a host process's nodes, beating together on one socket.

    Each second one :class:`~gossip.wire.schema.BeatBatch` carries the beat of every node
    whose final report the coordinator does not hold yet; a final report goes out as soon as
    it is there (in a batch of the nodes that have a new one). The coordinator's echoes come
    back in one BeatBatch, each taken by its node's :class:`Lifeline`; a :class:`Stop` goes to
    every node. ``keys``: the key the process's nodes registered with in one batch.
    """

    def __init__(
        self,
        lines: list[Lifeline],
        *,
        context: zmq.asyncio.Context | None = None,
        keys: CurveKeys | None = None,
        coordinator_key: str = "",
    ) -> None:
        if not lines:
            raise ValueError("a lifeline group needs at least one lifeline")
        self.lines = lines
        self._by_name = {line.name: line for line in lines}
        self._context = context
        self._keys = keys
        self._coordinator_key = coordinator_key
        self._wake = asyncio.Event()
        for line in lines:  # a member's final report, or its delivery, wakes the batch
            line.share_wake(self._wake)

    async def run(self) -> None:
        """Beat until the coordinator holds every final report, or until cancelled."""
        sock = _socket(self._context, self._keys, self._coordinator_key)
        try:
            sock.connect(self.lines[0].coordinator)
            await self._beat(sock)
        finally:
            sock.close(0)

    async def _beat(self, sock: zmq.asyncio.Socket) -> None:
        final_sent: set[str] = set()
        receiving = asyncio.ensure_future(self._receive(sock, final_sent))  # as Lifeline's
        try:
            await self._send_beats(sock, final_sent, receiving)
        finally:
            receiving.cancel()

    async def _send_beats(
        self, sock: zmq.asyncio.Socket, final_sent: set[str], receiving: asyncio.Future[None]
    ) -> None:
        clock = self.lines[0]._clock
        orphan_after = min((line.orphan_after or math.inf) for line in self.lines)
        next_beat = -math.inf
        while True:
            pending = [line for line in self.lines if not line.delivered.is_set()]
            if not pending:
                return
            now = clock()
            periodic = now >= next_beat
            # Beats built only when due: every poll for every member cost 4,096 nodes' processes
            # a tenth of a core.
            due = [
                line.beat()
                for line in pending
                if periodic or (line.name not in final_sent and line.stopped())
            ]
            if due:
                with contextlib.suppress(zmq.Again):  # no connection now: the next beat
                    await sock.send(encode_bytes(BeatBatch(tuple(due))), zmq.NOBLOCK)
                final_sent.update(b.name for b in due if b.final or b.final_over_mqtt)
                if periodic:
                    next_beat = now + BEAT_EVERY
            for line in pending:
                line.stop_if_orphaned()
            self._wake.clear()
            await wait_at_most(self._wake, _until(next_beat, clock(), orphan_after))
            if receiving.done():
                receiving.result()  # the socket failed: raise it here, as a read would

    async def _receive(self, sock: zmq.asyncio.Socket, final_sent: set[str]) -> None:
        while True:
            self._answer(await sock.recv(), final_sent)

    def _answer(self, frame: bytes, final_sent: set[str]) -> None:
        try:
            message = decode(frame)
        except ProtocolError as exc:
            log.debug("ignored an answer to a beat: %s", exc)
            return
        if isinstance(message, BeatBatch):
            for beat in message.beats:
                line = self._by_name.get(beat.name)
                if line is not None:
                    line.take(beat, beat.name in final_sent)
        elif isinstance(message, RegisterError):
            flagged = [
                line for line in self.lines if line.name in final_sent and line.final_over_mqtt()
            ]
            if not flagged:
                log.warning("the coordinator refused the process's beats: %s", message.reason)
            for line in flagged:  # an older coordinator: the next batch goes without the flag
                line.refused(message, sent_final=True)
        else:  # a Stop names the run: every node's
            for line in self.lines:
                line.take(message, line.name in final_sent)
