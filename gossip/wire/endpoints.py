"""ZeroMQ bind addresses as the command line takes them, and the address to connect to one.

A ``--bind`` value is checked here, before anything starts: :func:`parse_bind` reads
``tcp://HOST:PORT`` (``ipc://PATH`` and ``inproc://NAME`` pass as they are) and names what is
wrong with a malformed one. Whether ``HOST`` is an address of this machine and ``PORT`` is free
needs the machine, and is :mod:`coordinator.machine.interfaces`' business.

A wildcard bind (``tcp://0.0.0.0:5555``, ``tcp://*:5555``) listens on every interface, but is
no address to connect to: :func:`connect_endpoint` puts this host's address in its place, for
the messages that tell a user how to start the nodes.

Examples
--------
>>> parse_bind("--bind", "tcp://0.0.0.0:5555")
BindAddress(scheme='tcp', host='0.0.0.0', port=5555)
>>> connect_endpoint(parse_bind("--bind", "tcp://*:5555"), "10.0.0.7")
'tcp://10.0.0.7:5555'
>>> connect_endpoint(parse_bind("--bind", "tcp://127.0.0.1:5555"), "10.0.0.7")
'tcp://127.0.0.1:5555'
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from continuized.gossip.errors import ConfigError

__all__ = ["HOST_PLACEHOLDER", "WILDCARD_HOSTS", "BindAddress", "connect_endpoint", "parse_bind"]

WILDCARD_HOSTS = frozenset({"", "*", "0.0.0.0", "::"})
"""Hosts that bind every interface (ZeroMQ's ``*``, IPv4's and IPv6's any address)."""

HOST_PLACEHOLDER = "<this host's address>"
"""Said in place of this host's address when the machine does not tell one."""

_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
_FIX = "give tcp://HOST:PORT, e.g. tcp://0.0.0.0:5555 (every interface) or tcp://127.0.0.1:5555"


@dataclass(frozen=True, slots=True)
class BindAddress:
    """A checked bind address: ``scheme`` (tcp, ipc, inproc), ``host`` (tcp: IPv6 without
    brackets; ipc, inproc: the path or name) and ``port`` (``None``: any port, or not tcp)."""

    scheme: str
    host: str
    port: int | None

    @property
    def wildcard(self) -> bool:
        """Whether the address binds every interface (no address to connect to)."""
        return self.scheme == "tcp" and self.host in WILDCARD_HOSTS


def parse_bind(option: str, endpoint: str) -> BindAddress:
    """Read the ZeroMQ bind address ``endpoint`` given as ``option``.

    Raises
    ------
    ConfigError
        Not ``tcp://HOST:PORT`` (PORT 0..65535 or ``*``; an IPv6 HOST in brackets), nor
        ``ipc://PATH`` or ``inproc://NAME``; the message names ``option``, the value and the
        fix.
    """
    scheme, sep, rest = endpoint.partition("://")
    if not sep or scheme not in ("tcp", "ipc", "inproc"):
        raise ConfigError(f"{option} {endpoint!r} is not a ZeroMQ address: {_FIX}")
    if scheme != "tcp":
        if not rest:
            raise ConfigError(f"{option} {endpoint!r} names no {scheme} endpoint: {_FIX}")
        return BindAddress(scheme, rest, None)
    host, colon, port_text = rest.rpartition(":")
    if not colon or not host:
        raise ConfigError(f"{option} {endpoint!r} has no host or no port: {_FIX}")
    if port_text == "*":
        port = None
    elif port_text.isdigit() and int(port_text) <= 65535:
        port = int(port_text)
    else:
        raise ConfigError(
            f"{option} {endpoint!r}: the port must be 0..65535 (0 or *: any free port), got "
            f"{port_text!r}"
        )
    return BindAddress("tcp", _host(option, endpoint, host), port)


def _host(option: str, endpoint: str, host: str) -> str:
    """The host part of a tcp endpoint, checked; IPv6 without its brackets."""
    if host.startswith("[") and host.endswith("]"):
        inner = host[1:-1]
        try:
            return str(ipaddress.IPv6Address(inner)) if inner != "::" else "::"
        except ValueError:
            raise ConfigError(f"{option} {endpoint!r}: {inner!r} is not an IPv6 address") from None
    if ":" in host:
        raise ConfigError(
            f"{option} {endpoint!r}: an IPv6 host goes in brackets, e.g. tcp://[::1]:5555"
        )
    if host == "*" or _NAME.fullmatch(host):
        return host
    raise ConfigError(f"{option} {endpoint!r}: {host!r} is not a host name or address: {_FIX}")


def connect_endpoint(bind: BindAddress, here: str, port_text: str = "PORT") -> str:
    """The endpoint that reaches a socket bound at ``bind``: a wildcard host replaced by
    ``here`` (this host's address, or :data:`HOST_PLACEHOLDER`), any port by ``port_text``."""
    if bind.scheme != "tcp":
        return f"{bind.scheme}://{bind.host}"  # this machine's own: connected to as bound
    host = here if bind.wildcard else bind.host
    if ":" in host:
        host = f"[{host}]"
    port = port_text if bind.port is None else str(bind.port)
    return f"tcp://{host}:{port}"
