"""Ports on this machine: find free ones, refuse a taken one up front, wait for one to open.

The one home of port probing for the coordinator and the command line:

* :func:`free_port`, :func:`free_ports`: ports the OS says are free now (another process may
  take one before the caller binds it; callers retry on a bind failure);
* :func:`free_port_block`: consecutive ports for a host-mode process, below the kernel's
  ephemeral range (:func:`ephemeral_ports`) so that no outgoing connection takes one meanwhile;
* :func:`check_port_free`: a trial bind before a command starts anything, so that a taken port
  is one line that names the option, the port and the fix (a ZeroMQ ``--bind`` is checked
  whole by :func:`coordinator.machine.interfaces.check_zmq_bind`). The trial bind uses
  ``SO_REUSEADDR`` as the real servers do (asyncio and libzmq set it), so a port a finished
  run left in TIME_WAIT is not refused;
* :func:`is_local_host`: whether a host is an address of this machine (a trial bind on it);
* :func:`wait_for_port`: wait until a server accepts connections on a port.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import random
import socket
import time
from collections.abc import Iterable
from pathlib import Path

from continuized.gossip.errors import ConfigError, TransportError

__all__ = [
    "check_port_free",
    "ephemeral_ports",
    "free_port",
    "free_port_block",
    "free_ports",
    "is_free",
    "is_local_host",
    "wait_for_port",
]

_FIXED_PORTS_FROM = 10_000
"""The lowest port a node is given: well above the ports of common services."""

_LINUX_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on ``host`` right now (the OS picks it).

    Another process may take it before the caller binds it; callers retry on a bind failure.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int, taken: Iterable[int] = (), host: str = "127.0.0.1") -> list[int]:
    """Return ``count`` distinct TCP ports free on ``host`` right now, none of them in ``taken``.

    :func:`free_port` twice can give the same port (the first is not bound yet), and so can a
    port drawn for a socket that binds later, such as the coordinator's.
    """
    seen = set(taken)
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(host)
        if port not in seen:
            seen.add(port)
            ports.append(port)
    return ports


def is_free(host: str, port: int) -> bool:
    """Whether ``host:port`` can be bound (TCP, IPv4) right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def is_local_host(host: str) -> bool | None:
    """Whether ``host`` (a name or address; a wildcard is) can be bound on this machine:
    ``None`` if the name does not resolve."""
    if host in ("", "*", "0.0.0.0", "::"):
        return True
    if host in {name for _, name in socket.if_nameindex()}:
        return True  # ZeroMQ binds an interface by its name (tcp://eth0:5555)
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):
        return None
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as sock:
            try:
                sock.bind((address[0], 0, *address[2:]))
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:
                    continue
                return True  # another refusal is not about the address
            return True
    return False


def ephemeral_ports() -> tuple[int, int]:
    """The kernel's range of source ports for outgoing connections, inclusive.

    Linux says it in ``/proc/sys/net/ipv4/ip_local_port_range`` (32768-60999 by default);
    elsewhere, the IANA range 49152-65535 (macOS, Windows).
    """
    with contextlib.suppress(OSError, ValueError):
        low, high = Path(_LINUX_RANGE).read_text().split()
        return int(low), int(high)
    return 49152, 65535


def free_port_block(host: str, size: int, attempts: int = 50) -> int:
    """Return a port P such that P, P+1, ..., P+size-1 are all free on ``host`` right now,
    and all below the kernel's ephemeral range (:func:`ephemeral_ports`) when there is room.

    Host mode binds node i of a process on P+i, and a restarted process binds the same ports
    again. In the ephemeral range, the source port of any outgoing connection (a thousand
    nodes open thousands: their MQTT clients, their neighbours' sockets) could take one of
    them meanwhile, for as long as that connection lives, and the restart would fail every
    time. Below it, only a process that binds a fixed port can; the node then fails and is
    restarted.

    Raises
    ------
    ConfigError
        No such block was found in ``attempts`` tries.
    """
    low, _ = ephemeral_ports()
    for _ in range(attempts):
        if low - _FIXED_PORTS_FROM >= 4 * size:
            base = random.randrange(_FIXED_PORTS_FROM, low - size + 1)
            if all(is_free(host, base + i) for i in range(size)):
                return base
            continue
        base = free_port(host)  # no room below the range: take the OS's word
        if base + size - 1 > 65535:
            continue
        if all(is_free(host, base + i) for i in range(1, size)):
            return base
    raise ConfigError(f"found no {size} consecutive free ports on {host} in {attempts} tries")


def check_port_free(option: str, host: str, port: int | None, given: str = "") -> None:
    """Raise if ``host:port`` cannot be listened on now; ``None`` or port 0 is always free.

    Parameters
    ----------
    option : str
        The option the port came from (``--dashboard-port``), named in the message.
    host : str
        The address the server will bind (``127.0.0.1``, ``0.0.0.0``, ``*``, ``localhost``).
    port : int or None
        The port; 0 (any free port) and ``None`` (no server) need no check.
    given : str
        The option's value as the user wrote it, when it is not just the port.

    Raises
    ------
    ConfigError
        The port is in use or not allowed, naming ``option`` and the port (other bind errors,
        such as an address this machine does not have, are left to the server).
    """
    if not port:
        return
    # ZeroMQ's "*" is every IPv4 interface; an empty host is every interface of every family.
    bind_host = {"*": "0.0.0.0", "": None}.get(host, host)
    try:
        infos = socket.getaddrinfo(
            bind_host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror:
        return  # an unknown host is the server's own error to report, with its own message
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
                sock.listen(1)
            except OSError as exc:
                refusal = _refusal(f"{option} {given or port}", host, port, exc)
                if refusal is not None:
                    raise refusal from None


def _refusal(given: str, host: str, port: int, exc: OSError) -> ConfigError | None:
    """The error for a port that is taken or forbidden; ``None`` leaves others to the server."""
    option = given.split(" ", 1)[0]
    where = f"{host}:{port}" if host else f"port {port}"
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(
            f"{given}: {where} is already in use (another run or program listens "
            f"there); choose another {option}, or 0 for any free port"
        )
    if exc.errno == errno.EACCES:
        return ConfigError(
            f"{given}: not allowed to listen on {where} (ports below 1024 need root); "
            f"choose a port of 1024 or more"
        )
    # An address this machine does not have, a family it lacks: the server says it, as before.
    return None


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
            raise TransportError(
                f"the process to listen on {host}:{port} exited with code {proc.returncode}"
            )
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
