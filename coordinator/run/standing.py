"""A standing coordinator: successive runs on the same standing nodes, each one submitted.

``gossip coordinator --standing`` keeps the broker connection and waits for submissions;
``gossip node --standing`` keeps the node processes between runs (:mod:`node.host`);
``gossip submit`` sends a run and waits for its summary (:mod:`cli.submit_cmd`).

Topics (JSON; the ``operator`` account of :func:`gossip.wire.access.acl_grants` may write
the first and read the others, so both brokers enforce who submits):

* the submit topic of run ``<id>`` (:meth:`gossip.wire.pubsub.Topics.submit`) -- a run's
  settings, each one of :data:`SUBMIT_FIELDS` (those not given keep the coordinator's own: its
  command line);
* its result topic -- the answer: ``{"id", "state": "queued", "position"}``
  at once, then ``{"id", "state": "done", "record"}`` (the run's final record, as ``--json``
  writes it), ``{"id", "state": "refused", "error"}`` naming the bad value, or
  ``{"id", "state": "failed", "error"}`` (a run that could not start, e.g. nodes missing);
* the standing topic -- retained: ``idle``, ``running`` or ``stopped``, the runs
  done, the nodes expected; ``gone`` is the coordinator's last will, which the broker publishes
  when it vanishes without a word (killed, its connection cut). Submissions are not retained,
  so a submitter sends its own only once this says a standing coordinator listens (``idle`` or
  ``running``), and gives up within :data:`STANDING_WAIT` seconds when it does not.

Rules. One run at a time, in arrival order. A submission is checked completely (the same
checks as the command line, :func:`coordinator.run.config.prepare`) before it is queued, and a
bad one never stops the coordinator. Its graph must have the standing cluster's node count.
Each run is a new :class:`~coordinator.run.service.Coordinator`: a new run id, registry and
epoch; its values are drawn afresh from its ``values`` spec (seeded, ``gaussian:SEED``); its
ledgers, traces and exact curve start empty. The standing nodes register again under their
names for each run, and take the epoch of its Bootstrap as the name of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from continuized.coordinator.figures.state import BrokerStatus
from continuized.coordinator.mqtt.link import MqttLink
from continuized.coordinator.run._groups import single_error
from continuized.coordinator.run.config import CoordinatorConfig, check_positive, prepare
from continuized.gossip.errors import ConfigError, GossipError
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import check_algorithm
from continuized.gossip.wire.pubsub import Topics, parse_broker

__all__ = [
    "STANDING_WAIT",
    "SUBMIT_FIELDS",
    "StandingCoordinator",
    "check_submission",
    "parse_submission",
    "submit_run",
    "submitted_config",
]

log = logging.getLogger(__name__)
_DRAIN = 2.0  # seconds to hand the last status to the broker before leaving
_LISTENING = ("idle", "running")  # the standing topic's phases of a coordinator that listens

STANDING_WAIT = 5.0
"""Seconds ``gossip submit`` waits for the standing topic to say a coordinator listens before
it gives up, naming the broker and what to start (``--standing-wait``). The topic is
retained: a standing coordinator's presence comes with the subscription."""

SUBMIT_FIELDS: Mapping[str, type] = {
    "graph": str,
    "algorithm": str,
    "rate": float,
    "until": float,
    "values": str,
    "timeout": float,
    "problem": str,
    "data": str,
    "split": str,
}
"""What a submission may set, and its type (``timeout`` is the run's ``--timeout``)."""

_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def parse_submission(payload: bytes) -> dict[str, Any]:
    """Read a submission's JSON into the settings it changes (keys of :data:`SUBMIT_FIELDS`).

    Raises
    ------
    ConfigError
        Not a JSON object, an unknown field, or a value of the wrong type (named).

    Examples
    --------
    >>> parse_submission(b'{"algorithm": "rg", "rate": 300}')
    {'algorithm': 'rg', 'rate': 300.0}
    """
    try:
        data = json.loads(payload)
    except ValueError as exc:
        raise ConfigError(f"a submission must be a JSON object: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"a submission must be a JSON object, got {type(data).__name__}")
    out: dict[str, Any] = {}
    for key, value in data.items():
        kind = SUBMIT_FIELDS.get(key)
        if kind is None:
            raise ConfigError(
                f"unknown submission field {key!r}; valid: {', '.join(SUBMIT_FIELDS)}"
            )
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{key} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ConfigError(f"{key} must be finite, got {value!r}")
            out[key] = float(value)
        elif not isinstance(value, str):
            raise ConfigError(f"{key} must be a string, got {value!r}")
        else:
            out[key] = value
    return out


def check_submission(changes: Mapping[str, Any]) -> None:
    """Check a submission's ``changes`` as the command line checks the same options, before
    it is sent (the coordinator checks it again, with its own settings for the others).

    Raises
    ------
    ConfigError
        A bad value, named as on the command line (``--rate must be a finite number > 0``).
    """
    for key in ("rate", "until", "timeout"):
        if key in changes:
            check_positive(f"--{key}", float(changes[key]))
    if "graph" in changes:
        parse_topology(str(changes["graph"]))
    if "algorithm" in changes:
        check_algorithm(str(changes["algorithm"]), problem=bool(changes.get("problem")), live=True)


def submitted_config(base: CoordinatorConfig, changes: Mapping[str, Any]) -> CoordinatorConfig:
    """The standing coordinator's ``base`` settings with a submission's ``changes``, checked.

    Raises
    ------
    ConfigError
        A bad value (as on the command line), or a graph whose node count is not the
        standing cluster's.
    """
    settings = dict(changes)
    if "timeout" in settings:
        settings["run_timeout"] = settings.pop("timeout")
    if settings.get("problem"):  # an optimization's defaults, as on the command line
        settings.setdefault("data", base.data or "breast-cancer")
        settings.setdefault("split", base.split or "iid:0")
    # Never adopt a run left on the status topic: a submitted run is always a new one.
    config = dataclasses.replace(base, **settings, resume=False)
    if config.graph != base.graph:
        have = parse_topology(base.graph, weighted=base.weighted).n
        got = parse_topology(config.graph, weighted=config.weighted).n
        if got != have:
            raise ConfigError(
                f"graph {config.graph!r} has {got} nodes but the standing cluster has {have} "
                f"({base.graph}); submit a graph of {have} nodes"
            )
    prepare(config)  # every other check, with the command line's messages
    return config


RunFn = Callable[[CoordinatorConfig], Awaitable[dict[str, Any] | None]]
"""Runs one submitted run to its end and returns its final record (None: no record)."""


@dataclass(slots=True)
class _Job:
    id: str
    config: CoordinatorConfig


class StandingCoordinator:
    """Wait for submissions on the broker and run them one after the other (module docstring).

    Parameters
    ----------
    config : CoordinatorConfig
        The defaults of every run (``gossip coordinator --standing``'s command line); its
        broker carries the submissions.
    run : coroutine function (CoordinatorConfig) -> dict or None
        Runs one run to its end and returns its final record (None: no record).
    """

    def __init__(self, config: CoordinatorConfig, run: RunFn) -> None:
        if not config.broker:
            raise ConfigError(
                "--standing takes its runs from the broker: give --broker mqtt://host:1883"
            )
        _, plan = prepare(config)
        self.config = config
        self.expected = plan.expected
        self.runs = 0
        self._run = run
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._topics = Topics(config.cluster)
        sec = plan.security
        url = config.broker if sec is None else sec.coordinator_broker(config.broker)
        self.link = MqttLink.to(
            url,
            config.cluster,
            self._on_message,
            BrokerStatus(),
            ca=config.mqtt_ca,
            subscriptions=[(self._topics.submit(), 1)],
            # Killed without a word, the coordinator's "idle" would stay retained, and every
            # submitter would send into the void: the broker says "gone" in its place.
            will=(self._topics.standing, self._presence("gone")),
        )

    async def serve(self) -> None:
        """Run every submitted run in turn, until cancelled.

        Raises
        ------
        TransportError
            The broker was not reached within ``broker_wait`` seconds, or refused the login.
        """
        with single_error():
            async with asyncio.TaskGroup() as tg:
                link = tg.create_task(self.link.run(), name="standing-mqtt")
                try:
                    await self.link.reached(self.config.broker_wait)
                    self._announce("idle")
                    while True:
                        job = await self._queue.get()
                        await self._one(job)
                finally:
                    # Said before leaving, so that a submitter is told rather than sends into
                    # the void.
                    self._announce("stopped")
                    if self.link.connected.is_set():
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(_DRAIN):
                                await self.link.wait_idle()
                    self.link.stop()
                    link.cancel()

    async def _one(self, job: _Job) -> None:
        self._announce("running", job.id)
        log.info("standing: run %s (%s)", job.id, _settings_text(job.config))
        try:
            record = await self._run(job.config)
        except GossipError as exc:  # a run that fails (too few nodes) never ends the coordinator
            log.warning("standing: run %s failed: %s", job.id, exc)
            self._answer(job.id, {"state": "failed", "error": str(exc)})
        else:
            self._answer(job.id, {"state": "done", "record": record})
        self.runs += 1
        self._announce("idle")

    def _on_message(self, topic: str, payload: bytes) -> None:
        run_id = self._topics.submitted(topic) or ""
        if not run_id or not set(run_id) <= _ID_CHARS or len(run_id) > 64:
            log.warning("standing: ignored a submission on %r (not a valid id)", topic)
            return
        try:
            config = submitted_config(self.config, parse_submission(payload))
        except ConfigError as exc:
            log.warning("standing: refused run %s: %s", run_id, exc)
            self._answer(run_id, {"state": "refused", "error": str(exc)})
            return
        self._queue.put_nowait(_Job(run_id, config))
        self._answer(run_id, {"state": "queued", "position": self._queue.qsize()})

    def _answer(self, run_id: str, body: dict[str, Any]) -> None:
        self.link.publish(self._topics.result(run_id), {"id": run_id, **body})

    def _announce(self, phase: str, run_id: str = "") -> None:
        self.link.publish(self._topics.standing, self._presence(phase, run_id), retain=True)

    def _presence(self, phase: str, run_id: str = "") -> dict[str, Any]:
        """The standing topic's body: ``phase`` (idle, running, stopped, gone) and the rest."""
        return {
            "phase": phase,
            "run": run_id,
            "runs_done": self.runs,
            "queued": self._queue.qsize(),
            "nodes": self.expected,
            "graph": self.config.graph,
            "time": time.time(),
        }


def _settings_text(config: CoordinatorConfig) -> str:
    """``grid:3x3, arg, rate 500/s, eps 1e-06, values gaussian:1`` for the log."""
    return (
        f"{config.graph}, {config.algorithm or 'default algorithm'}, rate {config.rate:g}/s, "
        f"eps {config.until:g}, values {config.values or 'the nodes own'}"
    )


async def submit_run(
    broker: str,
    cluster: str,
    changes: Mapping[str, Any],
    *,
    wait: float,
    standing_wait: float = STANDING_WAIT,
    ca: str | None = None,
    on_queued: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Submit a run to the standing coordinator of ``cluster`` and return its final answer.

    ``broker`` carries the operator's credentials (``mqtt://operator:PASSWORD@host:1883``) on
    a secured broker. The run is sent once the retained standing topic says a coordinator
    listens; the answer is the result topic's last message: ``state`` ``done`` (with the run's
    ``record``), ``refused`` or ``failed`` (with ``error``).

    Raises
    ------
    ConfigError
        A bad broker URL.
    TransportError
        The broker refused or could not be reached; no standing coordinator said it listens
        within ``standing_wait`` seconds (the message names the broker and what to start); or
        no answer came within ``wait`` seconds of the submission.
    """
    import secrets

    import aiomqtt

    from continuized.gossip.errors import TransportError

    address = parse_broker(broker)
    host, port = address.host, address.port
    url = f"{'mqtts' if address.tls else 'mqtt'}://{host}:{port}"  # no credentials: said
    username, password = address.username, address.password
    run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)
    topics = Topics(cluster)
    tls = aiomqtt.TLSParameters(ca_certs=ca) if address.tls else None
    sent = False
    seen = ""  # the standing topic's last phase
    try:
        # Until a coordinator says it listens: standing_wait; then the run's own wait.
        async with asyncio.timeout(standing_wait) as deadline:
            async with aiomqtt.Client(
                host,
                port,
                identifier=f"gossip-submit-{run_id}",
                username=username,
                password=password,
                tls_params=tls,
                keepalive=10,
                timeout=5.0,
            ) as client:
                await client.subscribe(topics.result(run_id), qos=1)
                await client.subscribe(topics.standing, qos=1)
                async for message in client.messages:
                    answer = _json_object(message.payload)
                    if answer is None:
                        continue
                    if message.topic.matches(topics.standing):
                        seen = str(answer.get("phase", ""))
                        if not sent and seen in _LISTENING:
                            await client.publish(
                                topics.submit(run_id), json.dumps(dict(changes)), qos=1
                            )
                            sent = True
                            deadline.reschedule(asyncio.get_running_loop().time() + wait)
                        continue
                    if answer.get("state") == "queued":
                        if on_queued is not None:
                            on_queued(int(answer.get("position", 0)))
                        continue
                    return answer
    except TimeoutError:
        if not sent:
            said = (
                f"its standing topic says {seen!r}"
                if seen
                else f"nothing on {topics.standing} within {standing_wait:g} s"
            )
            raise TransportError(
                f"no standing coordinator of cluster {cluster!r} listens on {url} ({said}); "
                f"start `gossip coordinator --standing --broker {url} --cluster {cluster}` "
                "(and its nodes: gossip node --standing); the run was not submitted"
            ) from None
        raise TransportError(
            f"run {run_id} was submitted but not over within {wait:g} s (raise --wait; "
            "the standing coordinator runs it all the same)"
        ) from None
    except aiomqtt.MqttError as exc:
        raise TransportError(
            f"cannot reach the MQTT broker {url} ({exc}); start it or correct --broker"
        ) from None
    raise TransportError(f"the broker {url} closed the connection before an answer")


def _json_object(payload: object) -> dict[str, Any] | None:
    """``payload`` as a JSON object, or None (anything else is not ours: ignored)."""
    if not isinstance(payload, bytes | bytearray | str):
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
