"""The MQTT side of the wire: where the broker is, and the run's topics (pure).

The one place both are spelled, for the nodes and the coordinator alike.

Broker URLs are ``mqtt://[user:pass@]host[:port]``, or ``mqtts://`` for TLS:
:func:`parse_broker` reads one into a :class:`BrokerAddress`, and :func:`redact_broker` hides
its password for logs, the status and the dashboard.

Every topic of cluster ``C`` lies under ``gossip/C/``:

=================================  ===========================================  ===============
topic                              what it carries                              who publishes
=================================  ===========================================  ===============
``gossip/C/node/<id>/state``       a node's periodic state report (JSON)        the node
``gossip/C/control``               commands: stop, resend, membership views     the coordinator
``gossip/C/coordinator/status``    the run's status, retained                   the coordinator
``gossip/C/membership``            leave requests                               a node leaving
``gossip/C/submit/<run>``          a run submitted to a standing coordinator    ``gossip submit``
``gossip/C/result/<run>``          that run's result                            the coordinator
``gossip/C/standing``              the standing coordinator's queue, retained   the coordinator
=================================  ===========================================  ===============

:class:`Topics` builds them for one cluster; ``Topics("+")`` gives the same layout for every
cluster, as the broker's access rules name them. Who may read or write which of them, and
matching a topic against a filter, is :mod:`gossip.wire.access`; this module only spells the
names.

Examples
--------
>>> parse_broker("mqtt://gossip:s%40cret@10.0.0.2:1884")
BrokerAddress(host='10.0.0.2', port=1884, username='gossip', password='s@cret', tls=False, ca=None)
>>> redact_broker("mqtt://gossip:secret@mosquitto:1883")
'mqtt://gossip:***@mosquitto:1883'
>>> Topics("lab").state(3)
'gossip/lab/node/3/state'
>>> Topics("lab").states
'gossip/lab/node/+/state'
>>> Topics("+").control
'gossip/+/control'
>>> Topics("lab").node_of("gossip/lab/node/12/state")
12
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from continuized.gossip.errors import ConfigError

__all__ = [
    "ALL",
    "ANY",
    "ROOT",
    "BrokerAddress",
    "Topics",
    "check_cluster",
    "parse_broker",
    "redact_broker",
]


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """Where the broker is, the credentials if the URL carried any, and TLS (``mqtts://``).

    ``ca`` is the PEM file of the certificate authority to check the broker with (``None``:
    the system's).
    """

    host: str
    port: int
    username: str | None = None
    password: str | None = None
    tls: bool = False
    ca: str | None = None


def parse_broker(url: str) -> BrokerAddress:
    """Read ``mqtt[s]://[user:pass@]host[:port]`` (port 1883, or 8883 for TLS).

    Raises
    ------
    ConfigError
        Another scheme, no host, or a bad port.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
        raise ConfigError(
            f"broker URL {url!r} is not valid: the broker must be mqtt://HOST:PORT, or "
            "mqtts://HOST:PORT for TLS (e.g. mqtt://127.0.0.1:1883)"
        )
    tls = parts.scheme == "mqtts"
    try:
        port = parts.port or (8883 if tls else 1883)
    except ValueError:
        raise ConfigError(f"broker URL {url!r} has a bad port; expected 1..65535") from None
    return BrokerAddress(
        parts.hostname,
        port,
        unquote(parts.username) if parts.username else None,
        unquote(parts.password) if parts.password else None,
        tls,
    )


def redact_broker(url: str) -> str:
    """``url`` with its password replaced by ``***``, for logs, the status and the dashboard."""
    parts = urlsplit(url.strip())
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return f"{parts.scheme}://{parts.username}:***@{netloc}{parts.path}"


ROOT = "gossip"
"""The first level of every topic of every run."""

ALL = f"{ROOT}/#"
"""The filter that matches every topic of every cluster."""

ANY = "+"
"""The one-level wildcard: in place of a cluster, a node id or a run id, it matches them all."""

_CLUSTER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def check_cluster(name: str, what: str = "cluster name") -> str:
    """Return ``name`` if it can name a cluster; raise :class:`ConfigError` naming it if not.

    A cluster's name is one level of its MQTT topics, and part of log and file names: 1 to 64
    letters, digits, ``_``, ``.`` or ``-``. ``what`` names the setting in the message.

    Examples
    --------
    >>> check_cluster("lab-2")
    'lab-2'
    >>> check_cluster("a/b", "--cluster")
    Traceback (most recent call last):
    ...
    continuized.gossip.errors.ConfigError: --cluster 'a/b' is not valid: use 1 to 64 letters, \
digits, '_', '.' or '-' (it becomes a level of the run's MQTT topics)
    """
    if not _CLUSTER_NAME.fullmatch(name):
        raise ConfigError(
            f"{what} {name!r} is not valid: use 1 to 64 letters, digits, '_', '.' or '-' "
            "(it becomes a level of the run's MQTT topics)"
        )
    return name


@dataclass(frozen=True, slots=True)
class Topics:
    """The topic names of cluster ``cluster`` (:data:`ANY`: of every cluster).

    Raises
    ------
    ConfigError
        The cluster name (other than :data:`ANY`) fails :func:`check_cluster`.
    """

    cluster: str

    def __post_init__(self) -> None:
        if self.cluster != ANY:
            check_cluster(self.cluster)

    @property
    def prefix(self) -> str:
        """``gossip/<cluster>``: the level every topic of the cluster starts with."""
        return f"{ROOT}/{self.cluster}"

    def state(self, node: int | str) -> str:
        """``gossip/<cluster>/node/<node>/state``: node ``node``'s reports (:data:`ANY`: all)."""
        return f"{self.prefix}/node/{node}/state"

    @property
    def states(self) -> str:
        """The filter of every node's state reports."""
        return self.state(ANY)

    @property
    def control(self) -> str:
        """The coordinator's commands to the nodes."""
        return f"{self.prefix}/control"

    @property
    def status(self) -> str:
        """The coordinator's retained status."""
        return f"{self.prefix}/coordinator/status"

    @property
    def membership(self) -> str:
        """Leave requests from the nodes."""
        return f"{self.prefix}/membership"

    def submit(self, run: str = ANY) -> str:
        """Run ``run`` submitted to a standing coordinator (:data:`ANY`: every run)."""
        return f"{self.prefix}/submit/{run}"

    def result(self, run: str = ANY) -> str:
        """The result of submitted run ``run`` (:data:`ANY`: every run)."""
        return f"{self.prefix}/result/{run}"

    @property
    def standing(self) -> str:
        """The standing coordinator's retained queue."""
        return f"{self.prefix}/standing"

    def node_of(self, topic: str) -> int | None:
        """The node id of a state topic of this cluster; ``None`` for any other topic."""
        head, _, rest = topic.partition(f"{self.prefix}/node/")
        node, _, tail = rest.partition("/")
        if head or tail != "state" or not node.isdigit():
            return None
        return int(node)

    def submitted(self, topic: str) -> str | None:
        """The run id of a submit topic of this cluster; ``None`` for any other topic."""
        head, _, run = topic.partition(f"{self.prefix}/submit/")
        return run if not head and run and "/" not in run else None
