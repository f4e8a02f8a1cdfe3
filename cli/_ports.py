"""Refuse a port option whose port is taken, before a command starts anything.

A server that finds its port taken only after the broker and the nodes started fails the whole
run seconds later, under a traceback; a trial bind up front turns that into one line that names
the option, the port and the fix. The trial bind uses ``SO_REUSEADDR`` as the real servers do
(asyncio and libzmq set it), so a port a finished run left in TIME_WAIT is not refused.
"""

from __future__ import annotations

import errno
import socket

from gossip.errors import ConfigError

__all__ = ["check_port_free", "check_zmq_bind_free"]


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


def check_zmq_bind_free(option: str, endpoint: str, count: int = 1) -> None:
    """Raise if the ``tcp://host:port`` ``endpoint`` (and the ``count - 1`` ports after) is taken.

    Endpoints other than ``tcp://`` with a numeric port (``ipc://``, ``tcp://host:*``) are
    left to ZeroMQ.

    Raises
    ------
    ConfigError
        A port in use, naming ``option`` and the port.
    """
    if not endpoint.startswith("tcp://"):
        return
    host, _, port_text = endpoint[len("tcp://") :].rpartition(":")
    if not port_text.isdigit():
        return
    host = host.strip("[]")
    first = int(port_text)
    for port in range(first, first + count if first else first):
        check_port_free(option, host, port, endpoint)


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
