"""The node's MQTT side: periodic state reports out, the control topic in (contract C3).

The topics are the run's (:class:`gossip.wire.pubsub.Topics`):

* the node's state topic -- published every ``metrics_period`` seconds, JSON, and once more
  with ``"final": true`` when the node stops;
* the control topic -- subscribed; ``{"cmd": "stop"}`` asks the node to stop,
  ``{"cmd": "resend"}`` to send the exact-curve samples of its last :data:`RESEND_WINDOW`
  seconds again (the coordinator reconnected after a broker restart);
* the status topic -- subscribed; the coordinator keeps it retained, so a node that missed
  the stop commands still stops once the status says its run is over.

The broker is optional for gossip: the connection lives in its own task, reconnects with
jittered exponential backoff (:func:`gossip.wire.reconnect.reconnecting`, the coordinator's
loop too), and the node's exchanges never wait for it.

Ending the connection: call :meth:`NodeMqtt.stop`, then cancel the task of :meth:`NodeMqtt.run`.
A cancel alone is not enough on Python 3.11: aiomqtt waits for its publish, subscribe and
disconnect acknowledgements with ``asyncio.wait_for``, which drops a cancel that arrives as the
wait completes (CPython gh-86296), and its disconnect timeout turns a cancel into an
``MqttError`` that looks like a lost broker. Either way the task went on reporting or
reconnecting, and the process never exited. Every loop here checks the stop flag and whether its
task has a cancel pending (``Task.cancelling()``, which a swallowed ``CancelledError`` leaves
set), so a lost cancel costs at most one more iteration, even when the cancel comes from a task
group unwinding after an error, where nobody calls :meth:`NodeMqtt.stop`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import aiomqtt

from continuized.gossip.errors import TransportError
from continuized.gossip.wire.pubsub import BrokerAddress, Topics, parse_broker
from continuized.gossip.wire.reconnect import NODE_BACKOFF, Attempt, reconnecting

__all__ = ["ENDED_PHASES", "RESEND_WINDOW", "NodeMqtt", "ends_run", "request_leave"]

log = logging.getLogger(__name__)

RESEND_WINDOW = 10.0
"""Seconds of exact-curve samples re-sent after a reconnection (this node's, or the
coordinator's: it asks with ``{"cmd": "resend"}``): reports are QoS 0, and a broker that dies
takes the last ones it had not forwarded (and those still in the socket) with it; a node back
before the coordinator reports to nobody until the coordinator has subscribed again."""
_FINAL_RETRY = 0.2  # seconds between two tries of the final report


ENDED_PHASES = frozenset({"stopping", "done", "failed"})
"""Phases of the coordinator's status after which the run's nodes must stop."""


def ends_run(status: object, epoch: float) -> bool:
    """Whether a coordinator status says that the run started at ``epoch`` is over.

    The status is retained, so a node that missed every ``{"cmd": "stop"}`` (it was
    reconnecting, or the coordinator gave up waiting and exited) still learns it on its next
    connection. The epoch names the run: a later run's nodes ignore an old run's status.
    """
    if not isinstance(status, dict) or status.get("phase") not in ENDED_PHASES:
        return False
    ended = status.get("epoch")
    return isinstance(ended, int | float) and abs(float(ended) - epoch) < 1e-6


class NodeMqtt:
    """The MQTT connection of one process: its nodes' reports out, stop commands in.

    A process hosting several nodes (host mode, :mod:`node.host`) keeps one connection for all
    of them: each node is a *member* (:meth:`add`) with its own state topic, and a stop on the
    control topic (or the retained status) stops every member. One connection per process
    instead of per node keeps a 1,000-node cluster at a few dozen broker connections.

    Parameters
    ----------
    broker : BrokerAddress
        The broker.
    cluster, node_id : str, int
        Name the topics (``node_id`` is the first member).
    snapshot : callable() -> dict
        Returns the member's current report (the C3 payload without ``final``).
    period : float
        Seconds between reports.
    on_stop : callable()
        Called when ``{"cmd": "stop"}`` arrives on the control topic, or when the
        coordinator's retained status says the run of ``epoch`` is over.
    epoch : float or None
        The run's epoch (from the bootstrap); None: only the control topic stops the node.
    """

    def __init__(
        self,
        broker: BrokerAddress,
        cluster: str,
        node_id: int,
        snapshot: Callable[[], dict[str, Any]],
        period: float,
        on_stop: Callable[[], None],
        epoch: float | None = None,
    ):
        self.broker = broker
        self.cluster = cluster
        self.topics = Topics(cluster)
        self.topic = self.topics.state(node_id)
        self.control = self.topics.control
        self.status = self.topics.status
        self._epoch = epoch
        self._identifier = f"gossip-{cluster}-node-{node_id}-{random.getrandbits(32):08x}"
        self._period = period
        # (state topic, snapshot, on_stop) of every node reported on this connection.
        self._members: list[tuple[str, Callable[[], dict[str, Any]], Callable[[], None]]] = []
        self.add(node_id, snapshot, on_stop)
        self._client: aiomqtt.Client | None = None
        # Other commands of the control topic (membership views: node.switchover).
        self._handlers: list[Callable[[dict[str, Any]], None]] = []
        self.published = 0
        self.reconnects = 0
        self._closing = False
        # By state topic: (monotonic time, samples) of the reports of the last RESEND_WINDOW
        # seconds, re-sent on the next connection in case the broker lost them.
        self._recent: dict[str, deque[tuple[float, list[Any]]]] = {}
        self._resend: set[str] = set()  # members whose next report carries their recent samples
        self._lost_since: float | None = time.monotonic()  # None while connected
        # Host mode, secure: the process's other connections, which do not subscribe (see
        # :meth:`follow`); what this one hears on the control and status topics is theirs too.
        self._followers: list[NodeMqtt] = []
        self._listening = True

    def lost_for(self) -> float:
        """Seconds since the connection was lost (or since this link was made, if it never
        connected); 0 while connected. The orphan rule reads it (:mod:`node.lifeline`)."""
        since = self._lost_since
        return 0.0 if since is None else time.monotonic() - since

    def add(
        self, node_id: int, snapshot: Callable[[], dict[str, Any]], on_stop: Callable[[], None]
    ) -> None:
        """Report one more node of this process on this connection (host mode)."""
        self._members.append((self.topics.state(node_id), snapshot, on_stop))

    def follow(self, leader: NodeMqtt) -> None:
        """Hear the control and status topics through ``leader``, another connection of this
        process, instead of subscribing on this one (host mode, secure: one connection per
        node, as the ACL wants, but one copy of each command per process, not per node).

        Every control message and every retained status update reaches each subscribed
        connection: with 64 nodes in a process, 64 copies decoded per message, which cost
        the process more than its nodes' own reports.
        """
        self._listening = False
        leader._followers.append(self)

    def on_command(self, handler: Callable[[dict[str, Any]], None]) -> None:
        """Call ``handler`` with every control command other than stop (a JSON object)."""
        self._handlers.append(handler)

    def stop(self) -> None:
        """Make :meth:`run` end; cancel its task afterwards (see the module docstring)."""
        self._closing = True

    def _ending(self) -> bool:
        """Stopped, or this task has a cancel pending, though aiomqtt may have swallowed it."""
        task = asyncio.current_task()
        return self._closing or (task is not None and task.cancelling() > 0)

    def _on_stop(self) -> None:
        for _, _, on_stop in self._members:
            on_stop()
        for follower in self._followers:
            follower._on_stop()

    def _on_resend(self) -> None:
        self._resend = {member[0] for member in self._members}
        for follower in self._followers:
            follower._on_resend()

    def _on_command(self, command: dict[str, Any]) -> None:
        for handler in self._handlers:
            handler(command)
        for follower in self._followers:
            follower._on_command(command)

    def _client_for(self) -> aiomqtt.Client:
        client = aiomqtt.Client(
            self.broker.host,
            self.broker.port,
            username=self.broker.username,
            password=self.broker.password,
            tls_params=(
                aiomqtt.TLSParameters(ca_certs=self.broker.ca) if self.broker.tls else None
            ),
            identifier=self._identifier,
            keepalive=10,
            timeout=5.0,
        )
        # aiomqtt logs a warning for each publish past this many in flight; a host process
        # publishes all its members' reports at once (_report): 30,000 warnings a minute in
        # a 4,096-node run, a tenth of its processes' time spent logging them.
        client.pending_calls_threshold = max(client.pending_calls_threshold, 2 * len(self._members))
        return client

    async def run(self) -> None:
        """Stay connected (reporting, listening) until stopped; reconnect with backoff
        (:data:`~gossip.wire.reconnect.NODE_BACKOFF`)."""
        await reconnecting(
            self._session,
            retry_on=aiomqtt.MqttError,
            backoff=NODE_BACKOFF,
            rng=random.Random(),
            sleep=asyncio.sleep,
            ending=self._ending,
            on_lost=self._on_lost,
        )

    async def _session(self, attempt: Attempt) -> None:
        """One connection: subscribe, then report and listen until stopped or lost."""
        try:
            async with self._client_for() as client:
                if self._listening:
                    await client.subscribe(self.control, qos=1)
                    if self._epoch is not None:
                        await client.subscribe(self.status, qos=1)
                self._client = client
                self._lost_since = None
                if attempt.again:
                    self.reconnects += 1
                    self._resend = {member[0] for member in self._members}
                attempt.connected()
                async with asyncio.TaskGroup() as tg:
                    listen = (
                        tg.create_task(self._listen(client), name="mqtt-control")
                        if self._listening
                        else None
                    )
                    # Reporting returns only once stopped, even if a cancel was lost
                    # (on connect, say): the listener, which waits for messages, goes too.
                    await self._report(client)
                    if listen is not None:
                        listen.cancel()
        finally:
            self._client = None
            if self._lost_since is None:
                self._lost_since = time.monotonic()

    def _on_lost(self, error: BaseException) -> None:
        log.info("MQTT broker %s:%s unavailable: %s", self.broker.host, self.broker.port, error)

    async def _report(self, client: aiomqtt.Client) -> None:
        while not self._ending():
            # Every member's report at once, in one write: awaited one by one, each publish
            # waited for its own turn of the event loop, and a busy host process (2,048 nodes
            # at 3,000/s on 2 cores) sent a twentieth of its reports during the run.
            sends = [
                client.publish(topic, json.dumps(self._with_recent(topic, snapshot())), qos=0)
                for topic, snapshot, _ in self._members
            ]
            outcomes = await asyncio.gather(*sends, return_exceptions=True)
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
            self.published += len(sends)
            await asyncio.sleep(self._period)

    def _with_recent(self, topic: str, report: dict[str, Any]) -> dict[str, Any]:
        """``report``, its trace preceded, after a reconnection, by the samples of the last
        :data:`RESEND_WINDOW` seconds (the coordinator takes a grid time once; a repeat is
        harmless)."""
        samples = report.get("trace")
        if not isinstance(samples, list):
            return report
        now = time.monotonic()
        recent = self._recent.setdefault(topic, deque())
        while recent and recent[0][0] < now - RESEND_WINDOW:
            recent.popleft()
        if topic in self._resend:
            self._resend.discard(topic)
            again = [sample for _, sent in recent for sample in sent]
            if again:
                report = {**report, "trace": again + samples}
        if samples:
            recent.append((now, samples))
        return report

    async def _listen(self, client: aiomqtt.Client) -> None:
        async for message in client.messages:
            if self._ending():
                return
            payload = message.payload
            if not isinstance(payload, bytes | bytearray | str):
                continue
            try:
                command = json.loads(payload)
            except ValueError:
                log.warning("ignored a control message that is not JSON: %r", payload[:100])
                continue
            if message.topic.matches(self.status):
                if self._epoch is not None and ends_run(command, self._epoch):
                    log.info("the coordinator's status says this run is over: stopping")
                    self._on_stop()
            elif isinstance(command, dict) and command.get("cmd") == "stop":
                self._on_stop()
            elif isinstance(command, dict) and command.get("cmd") == "resend":
                # The coordinator reconnected: what it missed may include reports sent
                # while the node was connected and it was not.
                self._on_resend()
            elif isinstance(command, dict):
                self._on_command(command)

    async def publish_final(self, payload: dict[str, Any], within: float = 8.0) -> bool:
        """Publish the final report (QoS 1), on the live connection or a fresh one.

        Tried again until a broker takes it (one restarting comes back within seconds);
        returns False if none did within ``within`` seconds (less than the coordinator's
        ``stop_timeout``, 10 s, which waits for it).
        """
        data = json.dumps(payload)
        topic = self.topics.state(int(payload.get("node", -1)))
        if all(topic != member[0] for member in self._members):
            topic = self.topic  # not a member's report: the first member's topic
        last: BaseException | None = None
        try:
            async with asyncio.timeout(within):
                while True:  # a broker restarting now: try again until it is back
                    try:
                        if self._client is not None:
                            await self._client.publish(topic, data, qos=1)
                        else:
                            async with self._client_for() as client:
                                await client.publish(topic, data, qos=1)
                    except aiomqtt.MqttError as exc:
                        last = exc
                        self._client = None  # dead: the next try opens a fresh connection
                        await asyncio.sleep(_FINAL_RETRY)
                        continue
                    self.published += 1
                    return True
        except TimeoutError:
            log.warning("final report not published within %g s: %s", within, last)
            return False


async def request_leave(broker_url: str, cluster: str, name: str, ca: str | None = None) -> None:
    """Ask the coordinator to take node ``name`` out of the membership (``gossip node --leave``).

    Publishes ``{"cmd": "leave", "name": name}`` on the cluster's membership topic (QoS 1).

    Raises
    ------
    ConfigError
        ``broker_url`` is not an ``mqtt://`` or ``mqtts://`` URL.
    TransportError
        The broker cannot be reached within 5 seconds.
    """
    broker = parse_broker(broker_url)
    if ca is not None:
        broker = replace(broker, ca=ca)
    payload = json.dumps({"cmd": "leave", "name": name})
    try:
        async with (
            asyncio.timeout(5.0),
            aiomqtt.Client(
                broker.host,
                broker.port,
                username=broker.username,
                password=broker.password,
                tls_params=aiomqtt.TLSParameters(ca_certs=broker.ca) if broker.tls else None,
            ) as client,
        ):
            await client.publish(Topics(cluster).membership, payload, qos=1)
    except (TimeoutError, aiomqtt.MqttError) as exc:
        raise TransportError(f"cannot send the leave request to {broker_url}: {exc}") from exc
