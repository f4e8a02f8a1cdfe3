"""The MQTT broker of a run: an external one, a ``mosquitto`` process, or in-process amqtt.

``gossip up`` needs a broker and must work on a fresh machine. :func:`broker_for` picks, in order:

1. ``url`` given (``mqtt://host:port``): an external broker, used as it is (nothing started);
2. ``mosquitto`` on the PATH (or in ``/usr/sbin``): a child process listening on a free loopback
   port, with a generated configuration (anonymous access, no persistence) in a temporary
   directory;
3. otherwise an in-process amqtt broker on a free loopback port, anonymous: only for
   ``gossip up --insecure``. A secure run without mosquitto is refused with the fix
   (``apt-get install mosquitto``, ``--broker`` or ``--insecure``) rather than given an amqtt
   that anyone on the host could publish to: amqtt's password and topic plugins would be a
   second access-control implementation to keep equal to mosquitto's ACL, for a fallback.

Each is an async context manager that yields a :class:`RunningBroker` once the broker accepts
TCP connections, and stops it (and frees its port) on exit, whatever the exit path.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

from coordinator.procs import free_port, spawn, stop_process
from gossip.errors import ConfigError, TransportError

__all__ = [
    "BrokerKind",
    "MosquittoAuth",
    "RunningBroker",
    "amqtt_broker",
    "broker_credentials",
    "broker_for",
    "find_mosquitto",
    "mosquitto_broker",
    "parse_broker_url",
    "redact_broker_url",
    "wait_for_port",
]

BrokerKind = Literal["auto", "mosquitto", "amqtt"]

_START_TIMEOUT = 10.0  # seconds for a broker to start accepting connections
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
        The broker was started with our password file and ACL.
    """

    url: str
    host: str
    port: int
    kind: str
    access_controlled: bool = False


@dataclass(frozen=True, slots=True)
class MosquittoAuth:
    """A mosquitto ``password_file`` and ``acl_file`` (:mod:`coordinator.mqtt_auth`)."""

    passwd: Path
    acl: Path


def parse_broker_url(url: str) -> tuple[str, int]:
    """Return ``(host, port)`` of ``mqtt[s]://host[:port]`` (port 1883, or 8883 for TLS).

    Raises
    ------
    ConfigError
        Another scheme, no host, or a bad port.

    Examples
    --------
    >>> parse_broker_url("mqtt://10.0.0.2:1884")
    ('10.0.0.2', 1884)
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
        raise ConfigError(
            f"broker URL {url!r} is not valid; expected mqtt://host:port or mqtts://host:port "
            "(TLS), e.g. mqtt://127.0.0.1:1883"
        )
    try:
        port = parts.port or (8883 if parts.scheme == "mqtts" else 1883)
    except ValueError:
        raise ConfigError(f"broker URL {url!r} has a bad port; expected 1..65535") from None
    return parts.hostname, port


def broker_credentials(url: str) -> tuple[str | None, str | None]:
    """Return ``(username, password)`` of ``mqtt://user:pass@host:port`` (``None`` if absent).

    A broker that refuses anonymous clients (the compose file's) is reached with credentials
    in the URL; the nodes get the same URL in their bootstrap.

    Examples
    --------
    >>> broker_credentials("mqtt://gossip:s%40cret@mosquitto:1883")
    ('gossip', 's@cret')
    >>> broker_credentials("mqtt://127.0.0.1:1883")
    (None, None)
    """
    parts = urlsplit(url.strip())
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    return user, password


def redact_broker_url(url: str) -> str:
    """Return ``url`` with its password replaced by ``***``, for logs, status and the dashboard.

    Examples
    --------
    >>> redact_broker_url("mqtt://gossip:secret@mosquitto:1883")
    'mqtt://gossip:***@mosquitto:1883'
    """
    parts = urlsplit(url.strip())
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return f"{parts.scheme}://{parts.username}:***@{netloc}{parts.path}"


def find_mosquitto() -> str | None:
    """Return the path of the ``mosquitto`` binary, or ``None`` if it is not installed.

    Debian installs it in ``/usr/sbin``, which is not on every user's PATH.
    """
    found = shutil.which("mosquitto")
    if found is None and Path("/usr/sbin/mosquitto").is_file():
        found = "/usr/sbin/mosquitto"
    return found


async def wait_for_port(
    host: str, port: int, within: float, proc: asyncio.subprocess.Process | None = None
) -> None:
    """Wait until ``host:port`` accepts a TCP connection.

    Raises
    ------
    TransportError
        Not within ``within`` seconds, or ``proc`` exited first.
    """
    deadline = time.monotonic() + within
    last: OSError | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.returncode is not None:
            raise TransportError(f"the broker process exited with code {proc.returncode}")
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 1.0)
        except (OSError, TimeoutError) as exc:
            last = exc if isinstance(exc, OSError) else None
            await asyncio.sleep(0.05)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return
    raise TransportError(
        f"nothing accepts connections on {host}:{port} after {within:g} s ({last})"
    )


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
    binary: str, host: str = "127.0.0.1", port: int = 0, auth: MosquittoAuth | None = None
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
        try:
            yield RunningBroker(
                f"mqtt://{host}:{chosen}", host, chosen, "mosquitto", auth is not None
            )
        finally:
            await stop_process(proc)


@contextlib.asynccontextmanager
async def amqtt_broker(host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[RunningBroker]:
    """Run an amqtt broker inside this event loop on ``host:port`` (``0``: a free port)."""
    from amqtt.broker import Broker

    # amqtt logs every connection at INFO; a run of many nodes would drown the console.
    logging.getLogger("amqtt").setLevel(logging.WARNING)
    last: BaseException | None = None
    for _ in range(_ATTEMPTS):
        chosen = port or free_port(host)
        config = {
            "listeners": {"default": {"type": "tcp", "bind": f"{host}:{chosen}"}},
            "plugins": {
                "amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}
            },
        }
        broker = Broker(config)
        try:
            await broker.start()
        except Exception as exc:  # amqtt raises its own BrokerError or an OSError on bind
            last = exc
            if port:
                break
            continue
        try:
            # start() returns once the listener is bound; no probe connection is needed (amqtt
            # would log an empty connection as an error).
            yield RunningBroker(f"mqtt://{host}:{chosen}", host, chosen, "amqtt")
        finally:
            await asyncio.shield(broker.shutdown())
        return
    raise TransportError(f"the in-process amqtt broker could not start on {host}: {last}")


@contextlib.asynccontextmanager
async def broker_for(
    url: str | None = None,
    kind: BrokerKind = "auto",
    host: str = "127.0.0.1",
    auth: MosquittoAuth | None = None,
) -> AsyncIterator[RunningBroker]:
    """Yield the broker of a run: ``url`` if given, else an embedded one of ``kind``.

    Parameters
    ----------
    url : str, optional
        ``mqtt://host:port`` of an external broker; nothing is started, and the broker is only
        checked to accept TCP connections.
    kind : {"auto", "mosquitto", "amqtt"}
        ``auto``: mosquitto if installed, else amqtt.
    host : str
        Loopback address for an embedded broker.
    auth : MosquittoAuth, optional
        Password file and ACL for an embedded mosquitto: a secure run. amqtt is then refused.

    Raises
    ------
    ConfigError
        A bad URL or kind, ``kind="mosquitto"`` without the binary, or ``auth`` (a secure run)
        without mosquitto.
    TransportError
        The broker does not accept connections.
    """
    if url:
        b_host, b_port = parse_broker_url(url)
        await wait_for_port(b_host, b_port, _START_TIMEOUT)
        yield RunningBroker(url.strip(), b_host, b_port, "external")
        return
    if kind not in ("auto", "mosquitto", "amqtt"):
        raise ConfigError(f"unknown broker kind {kind!r}; valid: auto, mosquitto, amqtt")
    binary = find_mosquitto() if kind in ("auto", "mosquitto") else None
    if kind == "mosquitto" and binary is None:
        raise ConfigError(
            "--embedded-broker mosquitto: no mosquitto binary found (apt-get install mosquitto), "
            "or use auto/amqtt"
        )
    if binary is None and auth is not None:
        # amqtt gets no passwords or ACL from us (see the module header): rather than run a
        # "secure" cluster whose MQTT anyone on the host can write to, refuse.
        raise ConfigError(
            "a secure run needs mosquitto for the MQTT passwords and ACL, and the in-process "
            "amqtt broker has neither: install it (apt-get install mosquitto), give an "
            "access-controlled broker with --broker, or pass --insecure"
        )
    if binary is not None:
        async with mosquitto_broker(binary, host, auth=auth) as running:
            yield running
    else:
        async with amqtt_broker(host) as running:
            yield running
