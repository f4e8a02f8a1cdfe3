"""The coordinator's MQTT connection: node reports in, status and control out (contract C3).

The cluster's topics (:class:`gossip.wire.pubsub.Topics`):

* every node's state topic -- subscribed: the nodes' periodic JSON reports;
* the status topic -- published retained, and subscribed too: on start a coordinator reads
  the retained status a previous coordinator left, to resume its run;
* the control topic -- published: ``{"cmd": "stop", "run": <run id>}``, and
  ``{"cmd": "resend"}`` after each reconnection (the nodes send their recent exact-curve
  samples again: those of the outage went nowhere).

:meth:`MqttLink.run` keeps one connection up until stopped: it connects, subscribes, sends
whatever is queued (the latest status first), and hands every incoming message to a callback.
When the broker goes away it reconnects with jittered exponential backoff
(:data:`gossip.wire.reconnect.COORDINATOR_BACKOFF`, quicker than the nodes', in the loop they
use too), so a broker restart costs a few reports and nothing else. Outgoing messages wait in a
queue while disconnected; the status is kept apart (only the latest matters) and re-sent on
every reconnect.

Its first connection is different: a broker that cannot be reached at the start (nothing
listens, an unknown name, a refused login or certificate) is a setting to correct, not an outage
to wait out. :meth:`MqttLink.reached` waits for that connection a few seconds and then names the
broker and the fix; a login or certificate the broker refuses is said at once.

To end it, call :meth:`MqttLink.stop`, then cancel the task: a cancel alone can be lost inside
aiomqtt on Python 3.11 (the rule and its reason are in :mod:`node.mqtt`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import random
import select
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiomqtt
from aiomqtt.exceptions import MqttConnectError

from continuized.coordinator.figures.state import BrokerStatus
from continuized.gossip.errors import TransportError
from continuized.gossip.wire.pubsub import Topics, parse_broker
from continuized.gossip.wire.reconnect import COORDINATOR_BACKOFF, Attempt, reconnecting

__all__ = ["READS_PER_WAKE", "MqttLink", "drain_reads", "refused_for_good"]

READS_PER_WAKE = 256
"""MQTT packets the coordinator reads, at the most, each time its socket wakes the event loop.

aiomqtt reads one packet per wake-up (paho's ``loop_read`` reads more only while QoS 1 or 2
messages are in flight), and its message iterator takes two more turns per message, so the
coordinator took one report every turn or two of its event loop. With
4,096 nodes, whose lifelines' beats fill each turn, that was 10 to 50 reports a second of the
500 sent: it was 20 s behind at the stop, and the run lost its exact curve."""

log = logging.getLogger(__name__)


class MqttLink:
    """One resilient MQTT connection for the coordinator.

    Parameters
    ----------
    host, port : str, int
        The broker.
    cluster : str
        Cluster name (its topics: :class:`~gossip.wire.pubsub.Topics`).
    on_message : callable(topic, payload)
        Called for every message on the state and status topics, in the event loop.
    status : BrokerStatus
        Updated with the connection's state (shown by the dashboard).
    username, password : str, optional
        Credentials, for a broker that refuses anonymous clients.
    tls : bool
        Connect over TLS (``mqtts://``), checking the broker against ``ca`` (a PEM file) or,
        without it, the system's certificate authorities.
    subscriptions : sequence of (filter, qos), optional
        What to subscribe to; by default a run's topics (every node's state, the status, the
        leave requests). A standing coordinator's idle link takes only submissions.
    will : (topic, payload), optional
        The last will: published, retained, by the broker when this client vanishes without
        a goodbye (a standing coordinator's presence).
    """

    def __init__(
        self,
        host: str,
        port: int,
        cluster: str,
        on_message: Callable[[str, bytes], None],
        status: BrokerStatus,
        *,
        username: str | None = None,
        password: str | None = None,
        tls: bool = False,
        ca: Path | None = None,
        subscriptions: Sequence[tuple[str, int]] | None = None,
        will: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        self.host = host
        self.url = f"{'mqtts' if tls else 'mqtt'}://{host}:{port}"
        """The broker's URL, without credentials (for messages)."""
        self._will = (
            None
            if will is None
            else aiomqtt.Will(will[0], json.dumps(will[1]).encode(), qos=1, retain=True)
        )
        self._lost = asyncio.Event()  # set on every lost try; cleared by reached()
        self._last_error: BaseException | None = None
        self._tls = aiomqtt.TLSParameters(ca_certs=str(ca) if ca else None) if tls else None
        self.port = port
        self._username = username
        self._password = password
        self.topics = Topics(cluster)
        # (filter, qos); by default a run's: every node's state, the status, leave requests.
        self._subscriptions = tuple(
            subscriptions
            if subscriptions is not None
            else (
                # QoS 1: the broker delivers each message at the lower of the publisher's and
                # the subscriber's QoS. Periodic reports are QoS 0 either way (one lost is
                # replaced by the next), but a node's final report is QoS 1, and at 0 here it
                # was dropped with them when our intake fell behind (1,024 nodes on a loaded
                # machine: 2 of 1,024 finals came), where QoS 1 is queued.
                (self.topics.states, 1),
                (self.topics.status, 1),
                (self.topics.membership, 1),
            )
        )
        self._resends = subscriptions is None  # a run's link asks for missed reports again
        self._on_message = on_message
        self._status = status
        self._outbox: asyncio.Queue[tuple[str, bytes, int, bool]] = asyncio.Queue()
        self._latest_status: bytes | None = None
        self._status_dirty = asyncio.Event()
        self.connected = asyncio.Event()
        self.connected_since = 0.0
        self.disconnected_since = time.time()
        """Wall time since which the link has had no connection (meaningful while
        :attr:`connected` is clear)."""
        """Wall time (``time.time()``) of the latest connection: silence from a node before it
        says nothing about the node (the broker was away)."""
        self._publishing = False
        self._closing = False

    # -- outgoing ------------------------------------------------------------------------------

    @classmethod
    def to(
        cls,
        url: str,
        cluster: str,
        on_message: Callable[[str, bytes], None],
        status: BrokerStatus,
        *,
        ca: Path | None = None,
        subscriptions: Sequence[tuple[str, int]] | None = None,
        will: tuple[str, dict[str, Any]] | None = None,
    ) -> MqttLink:
        """A link to the broker of URL ``mqtt[s]://[user:pass@]host[:port]``: its address,
        credentials and TLS (``mqtts://``, checked against ``ca``) from the URL.

        Raises
        ------
        ConfigError
            A bad URL.
        """
        broker = parse_broker(url)
        return cls(
            broker.host,
            broker.port,
            cluster,
            on_message,
            status,
            username=broker.username,
            password=broker.password,
            tls=broker.tls,
            ca=ca,
            subscriptions=subscriptions,
            will=will,
        )

    def set_status(self, status: dict[str, Any]) -> None:
        """Publish ``status`` (retained) on the status topic, now or on the next connection."""
        self._latest_status = json.dumps(status, allow_nan=False).encode()
        self._status_dirty.set()

    def publish(
        self, topic: str, payload: dict[str, Any], qos: int = 1, retain: bool = False
    ) -> None:
        """Queue ``payload`` (JSON) on ``topic`` (``retain``: kept by the broker)."""
        self._outbox.put_nowait((topic, json.dumps(payload).encode(), qos, retain))

    def send_stop(self, run_id: str) -> None:
        """Queue ``{"cmd": "stop", "run": run_id}`` on the control topic."""
        self.publish(self.topics.control, {"cmd": "stop", "run": run_id})

    async def wait_idle(self) -> None:
        """Wait until everything queued (and the latest status) has been handed to the broker."""
        while True:
            if not (self._status_dirty.is_set() or self._publishing or not self._outbox.empty()):
                return
            await asyncio.sleep(0.02)

    # -- the connection ------------------------------------------------------------------------

    async def reached(self, within: float) -> None:
        """Wait for the first connection of :meth:`run` (running meanwhile), at most
        ``within`` seconds.

        Raises
        ------
        TransportError
            No connection within ``within`` seconds, or the broker refused this client for
            good (its login, its certificate): one line naming the broker and the fix.
        """
        try:
            async with asyncio.timeout(within):
                while not self.connected.is_set():
                    if self._last_error is not None and refused_for_good(self._last_error):
                        raise TransportError(self._refusal(self._last_error))
                    self._lost.clear()
                    connected = asyncio.ensure_future(self.connected.wait())
                    lost = asyncio.ensure_future(self._lost.wait())
                    try:
                        await asyncio.wait({connected, lost}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        connected.cancel()
                        lost.cancel()
        except TimeoutError:
            error = self._last_error
            reason = "no answer" if error is None else str(error) or type(error).__name__
            raise TransportError(
                f"cannot reach the MQTT broker {self.url} within {within:g} s ({reason}); "
                f"start it (e.g. `mosquitto -p {self.port}` on {self.host}) or correct --broker"
            ) from None

    def _refusal(self, error: BaseException) -> str:
        """The message for a broker that refused this client for good."""
        text = str(error)
        if "SSL" in text or "certificate" in text.lower():
            fix = "check --mqtt-ca (the broker's CA) and the host name in --broker"
        else:
            fix = "check the credentials: --keys, or mqtt://USER:PASSWORD@ in --broker"
        return f"the MQTT broker {self.url} refused this coordinator ({text}); {fix}"

    def stop(self) -> None:
        """Make :meth:`run` end; cancel its task afterwards."""
        self._closing = True

    def _ending(self) -> bool:
        """Stopped, or this task has a cancel pending, though aiomqtt may have swallowed it."""
        task = asyncio.current_task()
        return self._closing or (task is not None and task.cancelling() > 0)

    async def run(self) -> None:
        """Stay connected until stopped, reconnecting with jittered backoff
        (:data:`~gossip.wire.reconnect.COORDINATOR_BACKOFF`)."""
        identifier = f"gossip-coordinator-{os.getpid()}-{random.getrandbits(32):08x}"
        await reconnecting(
            functools.partial(self._session, identifier=identifier),
            retry_on=aiomqtt.MqttError,
            backoff=COORDINATOR_BACKOFF,
            rng=random.Random(),
            sleep=asyncio.sleep,
            ending=self._ending,
            on_lost=self._on_lost,
        )

    async def _session(self, attempt: Attempt, *, identifier: str) -> None:
        """One connection: subscribe, then read and write until stopped or lost."""
        try:
            client = aiomqtt.Client(
                self.host,
                self.port,
                identifier=identifier,
                username=self._username,
                password=self._password,
                tls_params=self._tls,
                will=self._will,
                keepalive=10,
                timeout=5.0,
                queue_type=_hand_over(self._take),
            )
            drain_reads(client)
            async with client:
                for topic, qos in self._subscriptions:
                    await client.subscribe(topic, qos=qos)
                if attempt.again and self._resends:
                    self._status.reconnects += 1
                    # Reports sent while we were away went nowhere: ask for the
                    # nodes' recent exact-curve samples again (node.mqtt.RESEND_WINDOW).
                    self.publish(self.topics.control, {"cmd": "resend"})
                attempt.connected()
                self._status.connected = True
                self.connected_since = time.time()
                self._status.last_error = ""
                self.connected.set()
                if self._latest_status is not None:
                    self._status_dirty.set()
                if self._ending():  # asked while connecting, and the cancel was lost
                    return
                await self._serve(client)
        finally:
            if self.connected.is_set():
                self.disconnected_since = time.time()
            self._status.connected = False
            self.connected.clear()

    def _on_lost(self, error: BaseException) -> None:
        self._status.last_error = str(error)
        self._last_error = error
        self._lost.set()
        log.info("MQTT broker %s:%s unavailable: %s", self.host, self.port, error)

    async def _serve(self, client: aiomqtt.Client) -> None:
        """Read and write on ``client`` until one side ends; raise the first side's error.

        Not a TaskGroup: on Python 3.11 a TaskGroup whose child fails while the group waits
        in ``__aexit__`` cancels this task and never uncancels it, so ``Task.cancelling()``
        stayed 1, :meth:`_ending` said yes, and the link gave up after the first broker
        restart: the coordinator never heard from the nodes again.
        """
        read = asyncio.create_task(self._read(client), name="mqtt-read")
        write = asyncio.create_task(self._write(client), name="mqtt-write")
        try:
            done, _ = await asyncio.wait({read, write}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            read.cancel()
            write.cancel()
            await asyncio.gather(read, write, return_exceptions=True)
        for task in done:
            error = None if task.cancelled() else task.exception()
            if error is not None:
                raise error

    async def _read(self, client: aiomqtt.Client) -> None:
        # Messages are taken as they are read (_HandOver); this only ends with the connection.
        async for message in client.messages:
            self._take(message)

    def _take(self, message: aiomqtt.Message) -> None:
        if self._ending():
            return
        payload = message.payload
        if isinstance(payload, str):
            payload = payload.encode()
        if not isinstance(payload, bytes | bytearray):
            return
        try:
            self._on_message(message.topic.value, bytes(payload))
        except Exception:  # called from paho's read: one bad message must not end the reads
            log.exception("a message on %s could not be taken", message.topic.value)

    async def _write(self, client: aiomqtt.Client) -> None:
        while not self._ending():
            if self._status_dirty.is_set() and self._latest_status is not None:
                self._status_dirty.clear()
                await self._send(client, self.topics.status, self._latest_status, 1, True)
                continue
            if not self._outbox.empty():
                await self._send(client, *self._outbox.get_nowait())
                continue
            status_wait = asyncio.ensure_future(self._status_dirty.wait())
            outbox_wait = asyncio.ensure_future(self._outbox.get())
            try:
                await asyncio.wait({status_wait, outbox_wait}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                status_wait.cancel()
                if not outbox_wait.done():
                    outbox_wait.cancel()
            # Checked after the cancel: a get() that completed meanwhile still holds an item.
            if outbox_wait.done() and not outbox_wait.cancelled():
                await self._send(client, *outbox_wait.result())

    async def _send(
        self, client: aiomqtt.Client, topic: str, payload: bytes, qos: int, retain: bool
    ) -> None:
        self._publishing = True
        try:
            await client.publish(topic, payload, qos=qos, retain=retain)
        finally:
            self._publishing = False


def refused_for_good(error: BaseException) -> bool:
    """Whether a failed connection to the broker would fail again alike: the broker answered
    no (a refused login: any CONNACK code but "server unavailable" or "busy"), or TLS refused
    its certificate. A refused TCP connection or an unknown name may be a broker starting."""
    if isinstance(error, MqttConnectError):
        return getattr(error.rc, "value", error.rc) not in (3, 136, 137)
    text = str(error)
    return "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text


def _hand_over(take: Callable[[aiomqtt.Message], None]) -> type[asyncio.Queue[aiomqtt.Message]]:
    """A message queue for aiomqtt that queues nothing: each message goes to ``take`` as paho
    reads it. aiomqtt's iterator costs a task and two turns of the event loop per message."""

    class HandOver(asyncio.Queue[aiomqtt.Message]):
        def put_nowait(self, item: aiomqtt.Message) -> None:
            take(item)

    return HandOver


def drain_reads(client: aiomqtt.Client, most: int = READS_PER_WAKE) -> bool:
    """Have ``client`` read up to ``most`` packets each time its socket wakes the event loop,
    as long as more are waiting (see :data:`READS_PER_WAKE`); call it before connecting.

    Returns False, and changes nothing, if this aiomqtt keeps its paho client elsewhere.
    """
    paho = getattr(client, "_client", None)
    read_one = getattr(paho, "loop_read", None)
    if paho is None or read_one is None:
        return False

    def loop_read(max_packets: int = 1) -> Any:
        rc = read_one(max_packets)
        for _ in range(most - 1):
            sock = paho.socket()
            if rc != 0 or sock is None:
                break
            pending = getattr(sock, "pending", None)  # TLS: bytes decrypted, not yet read
            if (
                not (pending is not None and pending() > 0)
                and not select.select([sock], [], [], 0)[0]
            ):
                break
            rc = read_one(max_packets)
        return rc

    paho.loop_read = loop_read
    return True
