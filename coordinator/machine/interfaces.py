"""This machine's addresses: check a ``--bind`` at once, and say where the nodes should connect.

* :func:`check_zmq_bind`: the one check of a ZeroMQ ``--bind`` (``gossip coordinator``,
  ``gossip node``) before a command starts anything: well formed
  (:func:`gossip.wire.endpoints.parse_bind`), a host that is an address of this machine and a
  port that is free (the trial binds of :mod:`coordinator.machine.ports`). Each refusal is one
  :class:`~gossip.errors.ConfigError` naming the option, the value and the fix.
* :func:`this_host_address`: the address other machines most likely reach this one at (the
  interface of the default route, else the host name), computed once.
* :func:`connect_address`: the endpoint to give ``gossip node --coordinator`` for a bind
  address; never a wildcard such as ``0.0.0.0``.
"""

from __future__ import annotations

import functools
import ipaddress
import socket

from continuized.coordinator.machine.ports import check_port_free, is_local_host
from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.endpoints import HOST_PLACEHOLDER, connect_endpoint, parse_bind

__all__ = ["check_zmq_bind", "connect_address", "this_host_address"]

# A documentation address (TEST-NET-1, RFC 5737): the kernel routes it by the default route,
# and a UDP "connect" sends nothing, so the probe names that route's interface and no one hears.
_PROBE = ("192.0.2.1", 9)


@functools.cache
def this_host_address() -> str:
    """The address of this host that other machines most likely reach: the interface of the
    default route, else the host name if it resolves to a non-loopback address, else
    :data:`gossip.wire.endpoints.HOST_PLACEHOLDER`. Computed once per process."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(_PROBE)
            address = str(probe.getsockname()[0])
        if not _loopback(address) and address != "0.0.0.0":
            return address
    except OSError:
        pass
    name = socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return HOST_PLACEHOLDER
    if name and any(not _loopback(str(info[4][0])) for info in infos):
        return name
    return HOST_PLACEHOLDER


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def connect_address(bind: str) -> str:
    """The endpoint nodes connect to for a coordinator bound at ``bind`` (a wildcard host
    replaced by :func:`this_host_address`); ``bind`` itself if it cannot be read."""
    try:
        parsed = parse_bind("--bind", bind)
    except ConfigError:
        return bind
    return connect_endpoint(parsed, this_host_address() if parsed.wildcard else "")


def check_zmq_bind(option: str, endpoint: str, count: int = 1) -> None:
    """Refuse the ZeroMQ bind address ``endpoint`` of ``option`` unless it can be bound here:
    well formed, on an address of this machine, and (with ``count`` > 1: it and the
    ``count - 1`` ports after it) free. ``ipc://`` and ``inproc://`` are left to ZeroMQ, and
    so is the port ``*``.

    Raises
    ------
    ConfigError
        Naming ``option``, the value and the fix.
    """
    bind = parse_bind(option, endpoint)
    if bind.scheme != "tcp":
        return
    local = is_local_host(bind.host)
    fix = (
        f"bind one of this machine's addresses, e.g. tcp://0.0.0.0:{bind.port or 5555} for all "
        "of them"
    )
    if local is None:
        raise ConfigError(f"{option} {endpoint}: the host {bind.host!r} does not resolve; {fix}")
    if not local:
        raise ConfigError(
            f"{option} {endpoint}: {bind.host} is not an address of this machine; {fix}"
        )
    if bind.port:
        for port in range(bind.port, bind.port + count):
            check_port_free(option, bind.host, port, endpoint)
