"""The MQTT broker of a run: an external one, a ``mosquitto`` process, or in-process amqtt.

``gossip up`` needs a broker and must work, secure, on a fresh machine with nothing but Python.
:func:`broker_for` picks, in order:

1. ``url`` given (``mqtt://host:port``): an external broker, used as it is (nothing started);
2. ``mosquitto`` on the PATH (or in ``/usr/sbin``; ``GOSSIP_MOSQUITTO`` overrides the lookup):
   a child process listening on a free loopback port, with a generated configuration (no
   persistence) in a temporary directory;
3. otherwise an in-process amqtt broker on a free loopback port.

A secure run gives the embedded broker, whichever it is, the same two files
(:func:`coordinator.mqtt.auth.write_broker_auth`): mosquitto reads them itself, amqtt through
the plugins of :mod:`coordinator.mqtt.amqtt_access`. Both then refuse anonymous clients and wrong
passwords, and apply one ACL. An ``--insecure`` run's embedded broker is anonymous.

Each is an async context manager that yields a :class:`RunningBroker` once the broker accepts
TCP connections, and stops it (and frees its port) on exit, whatever the exit path.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import ipaddress
import logging
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from continuized.coordinator.machine.children import spawn, stop_process
from continuized.coordinator.machine.ports import free_port, wait_for_port
from continuized.gossip.errors import ConfigError, TransportError
from continuized.gossip.wire.pubsub import parse_broker, redact_broker

__all__ = [
    "BrokerAuth",
    "BrokerKind",
    "Keeper",
    "MosquittoAuth",
    "RunningBroker",
    "amqtt_broker",
    "broker_for",
    "embedded_binary",
    "find_mosquitto",
    "mosquitto_broker",
    "reach_external",
]

BrokerKind = Literal["auto", "mosquitto", "amqtt"]

Keeper = Callable[[Callable[[int | None], bool]], Coroutine[Any, Any, None]]
"""An embedded broker's supervisor (:attr:`RunningBroker.keep`)."""

_RESTART_PAUSE = 0.2  # seconds between a broker's failure and its restart
_HEALTH_PERIOD = 0.5  # seconds between two checks of the in-process broker

_START_TIMEOUT = 10.0  # seconds for a broker to start accepting connections
_EXTERNAL_WAIT = 3.0  # seconds to retry an external broker that times out (not one that refuses)
_MOSQUITTO_ENV = "GOSSIP_MOSQUITTO"
_ATTEMPTS = 3  # a free port can be taken by someone else between choosing and binding it


@dataclass(frozen=True, slots=True)
class RunningBroker:
    """A broker that accepts connections.

    Attributes
    ----------
    url : str
        ``mqtt://host:port``.
    host : str
    port : int
    kind : str
        ``external``, ``mosquitto`` or ``amqtt``.
    access_controlled : bool
        The broker was started with our password file and ACL (either kind).
    keep : Keeper or None
        Supervises an embedded broker (``None``: an external one, not ours to restart):
        ``await keep(may_restart)`` restarts it on the same port, with the same password
        file and ACL, each time it fails and ``may_restart(code)`` allows it (``code``: the
        exit code of mosquitto, ``-N`` for signal N, or ``None`` for amqtt), and raises
        :class:`~gossip.errors.TransportError` once it does not; it never returns.
    """

    url: str
    host: str
    port: int
    kind: str
    access_controlled: bool = False
    keep: Keeper | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class BrokerAuth:
    """A ``password_file`` and an ``acl_file`` (:func:`coordinator.mqtt.auth.write_broker_auth`).

    mosquitto reads them as they are; amqtt through :mod:`coordinator.mqtt.amqtt_access`.
    """

    passwd: Path
    acl: Path


MosquittoAuth = BrokerAuth  # its name when only mosquitto could enforce it


def find_mosquitto() -> str | None:
    """Return the path of the ``mosquitto`` binary, or ``None`` if it is not installed.

    Debian installs it in ``/usr/sbin``, which is not on every user's PATH. The environment
    variable ``GOSSIP_MOSQUITTO`` overrides the lookup: ``none`` (as if it were not installed:
    the embedded broker is amqtt) or the binary's path.

    Raises
    ------
    ConfigError
        ``GOSSIP_MOSQUITTO`` names no executable file.
    """
    chosen = os.environ.get(_MOSQUITTO_ENV, "").strip()
    if chosen.lower() == "none":
        return None
    if chosen:
        if not (Path(chosen).is_file() and os.access(chosen, os.X_OK)):
            raise ConfigError(
                f"{_MOSQUITTO_ENV}={chosen!r} is not an executable file; give the path of the "
                "mosquitto binary, 'none' for the in-process amqtt broker, or unset it"
            )
        return chosen
    found = shutil.which("mosquitto")
    if found is None and Path("/usr/sbin/mosquitto").is_file():
        found = "/usr/sbin/mosquitto"
    return found


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        return False


async def reach_external(url: str) -> tuple[str, int]:
    """Check that the broker of ``--broker url`` accepts TCP connections; return its address.

    A refused connection on loopback is final: nothing listens there, and waiting would not
    change it. A timeout, an unknown name or a refusal from another host (a broker restarting)
    is retried for a few seconds.

    Raises
    ------
    ConfigError
        A bad URL.
    TransportError
        Nothing accepts connections there; the message names ``--broker`` and the URL.
    """
    address = parse_broker(url)
    host, port = address.host, address.port
    deadline = time.monotonic() + _EXTERNAL_WAIT
    while True:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 1.0)
        except (OSError, TimeoutError) as exc:
            # TimeoutError is an OSError too: test it first.
            if isinstance(exc, TimeoutError):
                reason = "no answer within 1 s"
            elif isinstance(exc, ConnectionRefusedError):
                reason = "connection refused"
            else:
                reason = exc.strerror or str(exc)
            final = isinstance(exc, ConnectionRefusedError) and _is_loopback(host)
            if final or time.monotonic() >= deadline:
                raise TransportError(
                    f"--broker {redact_broker(url)}: nothing accepts connections on "
                    f"{host}:{port} ({reason}); start the broker there, correct the URL, or "
                    "leave --broker out for an embedded broker"
                ) from None
            await asyncio.sleep(0.2)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return host, port


_MOSQUITTO_CONF = """\
# Generated by gossip up: one loopback listener, nothing kept on disk.
listener {port} {host}
{access}
# Stay the user who started it: mosquitto started as root would otherwise become "mosquitto"
# and lose access to the run's private key directory.
user {user}
persistence false
log_dest stderr
log_type error
log_type warning
max_queued_messages 10000
"""


@contextlib.asynccontextmanager
async def mosquitto_broker(
    binary: str, host: str = "127.0.0.1", port: int = 0, auth: BrokerAuth | None = None
) -> AsyncIterator[RunningBroker]:
    """Run ``mosquitto`` as a child process on ``host:port`` (``0``: a free port).

    With ``auth`` anonymous clients are refused and the password file and ACL apply;
    without it the broker is anonymous (``gossip up --insecure``).

    Raises
    ------
    TransportError
        It did not start (the message includes the end of its log).
    """
    with tempfile.TemporaryDirectory(prefix="gossip-mosquitto-") as tmp:
        conf = Path(tmp) / "mosquitto.conf"
        log = Path(tmp) / "mosquitto.log"
        for attempt in range(_ATTEMPTS):
            chosen = port or free_port(host)
            access = (
                "allow_anonymous true"
                if auth is None
                else f"allow_anonymous false\npassword_file {auth.passwd}\nacl_file {auth.acl}"
            )
            conf.write_text(
                _MOSQUITTO_CONF.format(
                    port=chosen, host=host, access=access, user=getpass.getuser()
                )
            )
            proc = await spawn([binary, "-c", str(conf)], log=log)
            try:
                await wait_for_port(host, chosen, _START_TIMEOUT, proc)
            except TransportError as exc:
                await stop_process(proc)
                if attempt + 1 < _ATTEMPTS and port == 0:
                    continue
                tail = log.read_text(errors="replace")[-800:] if log.exists() else ""
                raise TransportError(
                    f"mosquitto did not start on {host}:{chosen}: {exc}\n{tail}"
                ) from None
            break
        child = [proc]  # the live incarnation, replaced by each restart

        async def keep(may_restart: Callable[[int | None], bool]) -> None:
            while True:
                code = await child[0].wait()
                if not may_restart(code):
                    tail = log.read_text(errors="replace")[-800:] if log.exists() else ""
                    raise TransportError(
                        f"the embedded mosquitto on {host}:{chosen} exited with code {code} "
                        f"and was not restarted again\n{tail}"
                    )
                await asyncio.sleep(_RESTART_PAUSE)
                # The same configuration file: same port, same password file and ACL. A
                # restart that fails to listen exits, and counts as one more failure.
                child[0] = await spawn([binary, "-c", str(conf)], log=log)
                with contextlib.suppress(TransportError):
                    await wait_for_port(host, chosen, _START_TIMEOUT, child[0])

        try:
            yield RunningBroker(
                f"mqtt://{host}:{chosen}", host, chosen, "mosquitto", auth is not None, keep
            )
        finally:
            await stop_process(child[0])


@contextlib.asynccontextmanager
async def amqtt_broker(
    host: str = "127.0.0.1", port: int = 0, auth: BrokerAuth | None = None
) -> AsyncIterator[RunningBroker]:
    """Run an amqtt broker inside this event loop on ``host:port`` (``0``: a free port).

    With ``auth`` anonymous clients are refused and the password file and ACL apply (the
    plugins of :mod:`coordinator.mqtt.amqtt_access`); without it the broker is anonymous
    (``gossip up --insecure``).

    Raises
    ------
    TransportError
        It did not start (a port taken three times, or an unreadable ``auth`` file).
    """
    from continuized.coordinator.mqtt.amqtt_access import AccessBroker

    # amqtt logs every connection at INFO; a run of many nodes would drown the console.
    logging.getLogger("amqtt").setLevel(logging.WARNING)
    plugins: dict[str, dict[str, object]] = (
        {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}}
        if auth is None
        else {
            "continuized.coordinator.mqtt.amqtt_access.PasswordFilePlugin": {
                "password_file": str(auth.passwd)
            },
            "continuized.coordinator.mqtt.amqtt_access.AclFilePlugin": {"acl_file": str(auth.acl)},
        }
    )
    last: BaseException | None = None
    for _ in range(_ATTEMPTS):
        chosen = port or free_port(host)
        config = {
            "listeners": {"default": {"type": "tcp", "bind": f"{host}:{chosen}"}},
            "plugins": plugins,
        }
        try:
            broker = AccessBroker(config)  # loads the plugins: they read the auth files here
            await broker.start()
        except Exception as exc:  # amqtt raises its own BrokerError or an OSError on bind
            last = exc.__cause__ if exc.__cause__ is not None else exc
            if port or not isinstance(last, OSError):  # only a taken port is worth a retry
                break
            continue
        live = [broker]  # the live incarnation, replaced by each restart
        keep = _amqtt_keeper(live, config, f"{host}:{chosen}")

        try:
            # start() returns once the listener is bound; no probe connection is needed (amqtt
            # would log an empty connection as an error).
            yield RunningBroker(
                f"mqtt://{host}:{chosen}", host, chosen, "amqtt", auth is not None, keep
            )
        finally:
            with contextlib.suppress(Exception):  # a broker that broke has nothing to close
                await asyncio.shield(live[0].shutdown())
        return
    raise TransportError(f"the in-process amqtt broker could not start on {host}: {last}")


def _amqtt_keeper(live: list[Any], config: dict[str, Any], where: str) -> Keeper:
    """The supervisor of the in-process broker ``live[0]`` (:attr:`RunningBroker.keep`),
    which replaces ``live[0]`` by each fresh broker started with ``config``."""
    from continuized.coordinator.mqtt.amqtt_access import AccessBroker

    async def keep(may_restart: Callable[[int | None], bool]) -> None:
        # An in-process broker cannot be killed apart from this process: supervising it
        # means watching that it still serves (its listener open, its message loop alive),
        # and starting a fresh one on the same port, with the same files, if not.
        while True:
            await asyncio.sleep(_HEALTH_PERIOD)
            if _amqtt_serving(live[0]):
                continue
            if not may_restart(None):
                raise TransportError(
                    f"the in-process amqtt broker on {where} stopped serving and was not "
                    "restarted again"
                )
            with contextlib.suppress(Exception):  # it is broken already: best effort
                await asyncio.shield(live[0].shutdown())
            await asyncio.sleep(_RESTART_PAUSE)
            fresh = AccessBroker(config)
            with contextlib.suppress(Exception):  # not serving: the next check counts it
                await fresh.start()
            live[0] = fresh

    return keep


def _amqtt_serving(broker: object) -> bool:
    """Whether an amqtt broker still serves: started, its listeners open, its message loop
    running (amqtt has no public health call: these are its own attributes)."""
    state = getattr(getattr(broker, "transitions", None), "state", None)
    if state != "started":
        return False
    loop_task = getattr(broker, "_broadcast_task", None)
    if loop_task is not None and loop_task.done():
        return False
    for server in getattr(broker, "_servers", {}).values():
        instance = getattr(server, "instance", None)
        if instance is not None and not instance.is_serving():
            return False
    return True


def embedded_binary(kind: BrokerKind) -> str | None:
    """Return the mosquitto binary the embedded broker of ``kind`` runs (``None``: amqtt).

    Raises
    ------
    ConfigError
        An unknown kind, ``mosquitto`` without the binary, or a bad ``GOSSIP_MOSQUITTO``.
    """
    if kind not in ("auto", "mosquitto", "amqtt"):
        raise ConfigError(f"--embedded-broker must be auto, mosquitto or amqtt, got {kind!r}")
    binary = find_mosquitto() if kind in ("auto", "mosquitto") else None
    if kind == "mosquitto" and binary is None:
        hidden = os.environ.get(_MOSQUITTO_ENV, "").strip().lower() == "none"
        raise ConfigError(
            f"--embedded-broker mosquitto: {_MOSQUITTO_ENV}=none hides mosquitto; unset "
            f"{_MOSQUITTO_ENV}, or use --embedded-broker auto or amqtt"
            if hidden
            else "--embedded-broker mosquitto: no mosquitto binary found on the PATH or in "
            f"/usr/sbin; install it (apt-get install mosquitto), set {_MOSQUITTO_ENV} to its "
            "path, or use --embedded-broker auto or amqtt (in-process, as secure)"
        )
    return binary


@contextlib.asynccontextmanager
async def broker_for(
    url: str | None = None,
    kind: BrokerKind = "auto",
    host: str = "127.0.0.1",
    auth: BrokerAuth | None = None,
) -> AsyncIterator[RunningBroker]:
    """Yield the broker of a run: ``url`` if given, else an embedded one of ``kind``.

    Parameters
    ----------
    url : str, optional
        ``mqtt://host:port`` of an external broker; nothing is started, and the broker is only
        checked to accept TCP connections (:func:`reach_external`).
    kind : {"auto", "mosquitto", "amqtt"}
        ``auto``: mosquitto if installed (:func:`find_mosquitto`), else amqtt.
    host : str
        Loopback address for an embedded broker.
    auth : BrokerAuth, optional
        Password file and ACL for the embedded broker, either kind: a secure run.

    Raises
    ------
    ConfigError
        A bad URL or kind, or ``kind="mosquitto"`` without the binary.
    TransportError
        The broker does not accept connections.
    """
    if url:
        b_host, b_port = await reach_external(url)
        yield RunningBroker(url.strip(), b_host, b_port, "external")
        return
    binary = embedded_binary(kind)
    if binary is not None:
        async with mosquitto_broker(binary, host, auth=auth) as running:
            yield running
    else:
        async with amqtt_broker(host, auth=auth) as running:
            yield running
