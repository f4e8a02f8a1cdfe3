"""The address a node gives its peers: its bound endpoint, with a wildcard host made reachable.

A node bound on every interface (``tcp://0.0.0.0:PORT``) must tell its peers one address they
can reach: the one given (``--advertise``), else the interface this host would use toward the
coordinator (the peers share that network), else this host's name.
"""

from __future__ import annotations

import socket as pysocket
from urllib.parse import urlsplit

__all__ = ["advertised_address"]


def advertised_address(bound: str, advertise: str | None, toward: str | None = None) -> str:
    """Return the address peers should use to reach a socket bound at ``bound``.

    ``bound`` is the socket's actual endpoint (``tcp://0.0.0.0:41234``). A wildcard host is
    replaced by ``advertise`` if given, else by the local address used to reach ``toward`` (the
    coordinator: its interface is the one the peers share), else by this host's name.

    Examples
    --------
    >>> advertised_address("tcp://0.0.0.0:5000", "10.0.0.7")
    'tcp://10.0.0.7:5000'
    >>> advertised_address("tcp://127.0.0.1:5000", None)
    'tcp://127.0.0.1:5000'
    """
    parts = urlsplit(bound)
    host, port = parts.hostname or "", parts.port
    if advertise:
        host = advertise
    elif host in ("", "0.0.0.0", "*", "::"):
        host = _route_to(toward) or pysocket.gethostname()
    return f"{parts.scheme}://{host}:{port}"


def _route_to(toward: str | None) -> str | None:
    if not toward:
        return None
    parts = urlsplit(toward)
    if not parts.hostname:
        return None
    try:
        # A UDP "connect" sends nothing; it only asks the kernel which interface it would use.
        with pysocket.socket(pysocket.AF_INET, pysocket.SOCK_DGRAM) as probe:
            probe.connect((parts.hostname, parts.port or 1))
            return str(probe.getsockname()[0])
    except OSError:
        return None
