"""Who may do what in a secured cluster: the one access policy (pure).

The policy is stated here once, as values; each mechanism that enforces it only translates it.

Identities
----------
================  ==============================  =========================================
MQTT username     who                             may, on the topics of any cluster
================  ==============================  =========================================
``coordinator``   the coordinator                 read and write everything under ``gossip/``
``operator``      ``gossip submit``               write ``submit/<run>``; read
                                                  ``result/<run>`` and ``standing``
``node-<id>``     node ``<id>``                   write its own ``node/<id>/state``; read
                                                  ``control`` and ``coordinator/status``
``host-<j>``      host process ``<j>`` of a       write the state of each node it holds;
                  ``gossip up`` in host mode      read what a node reads
================  ==============================  =========================================

The topics are :class:`~gossip.wire.pubsub.Topics`' (``Topics("+")``: of every cluster).
Nobody else: an anonymous client or an unlisted user may do nothing. :func:`acl_grants` is that
table for one run, :func:`may` the one decision on it. Topics name nodes by id while usernames
carry a ``node-`` prefix, so the grants list each node (a mosquitto ``pattern`` with ``%u``
would need usernames equal to the ids). The dashboard has no account: it runs inside the
coordinator's process (its HTTP side has its own token, :mod:`coordinator.dashboard.server`).

Which ids a host process holds (:func:`host_blocks`): ``gossip up --nodes-per-process K``
splits N nodes into ``ceil(N / K)`` processes of nearly equal sizes (:func:`host_sizes`) and
gives host ``j`` the next ``size_j`` keys ``node-<k>`` in order; the registry numbers nodes by
the natural order of their names, so host ``j`` holds the ``j``-th contiguous block of ids, and
each node of it connects as ``host-<j>`` (:func:`account_of`). A node started by hand
(``gossip node``, keys of ``gossip keys init``) and a joiner keep their own ``node-<id>``.

Passwords: every account's is ``HMAC-SHA256(mqtt secret, username)`` (:func:`mqtt_password`).
The coordinator holds the secret (``gossip keys init`` writes it, :mod:`gossip.files.keys`) and
hands each node the password of its account in the bootstrap, which travels over CURVE
(:meth:`coordinator.membership.security.Security.node_broker`); brokers store only salted hashes.

CURVE (ZeroMQ) shares no rule with MQTT but the host blocks: it admits keys, not topics. The
coordinator admits the allow-list's keys and a registration only under the name its key is
listed with (:mod:`coordinator.membership.registrar`), or, in host mode, a batch of the nodes of
that key's host block (:func:`coordinator.run.enrollment.batch_rule`, by :func:`account_of`); a
node admits exactly its current neighbours' keys, each labelled with the neighbour's id, from its
bootstrap and each membership view (:mod:`node.transport.curve`). Those key lists are the
plan's data, not rules, so the ZAP handlers take them as they are.

Adapters
--------
* :mod:`coordinator.mqtt.auth` writes these grants as mosquitto's ``acl_file`` and the
  passwords as its ``password_file`` (the same files for either embedded broker);
* :mod:`coordinator.mqtt.amqtt_access` makes amqtt enforce those files, deciding with
  :func:`may`;
* :mod:`node.transport.curve` and :mod:`coordinator.membership.registrar`: the ZAP handlers.

Examples
--------
>>> acl = acl_grants(3)
>>> may(acl, "node-1", "gossip/lab/node/1/state", "write")
True
>>> may(acl, "node-1", "gossip/lab/node/2/state", "write")
False
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.pubsub import ALL, ANY, Topics

__all__ = [
    "COORDINATOR",
    "OPERATOR",
    "Access",
    "Action",
    "Grant",
    "account_of",
    "acl_grants",
    "filter_within",
    "host_blocks",
    "host_sizes",
    "host_username",
    "may",
    "mqtt_password",
    "node_username",
    "topic_matches",
]

COORDINATOR = "coordinator"
"""Name of the coordinator: its MQTT username, and its identity and key directory."""

OPERATOR = "operator"
"""MQTT username of whoever submits runs to a standing coordinator (``gossip submit``)."""

Access = Literal["read", "write", "readwrite"]
"""What a grant allows: receiving, publishing, or both."""

Action = Literal["read", "write"]
"""One use of a topic: receive (``read``) or publish (``write``)."""

_MAX_TOPIC = 65535  # MQTT's longest topic; counted in characters, as aiomqtt does


@dataclass(frozen=True, slots=True)
class Grant:
    """One rule of an account: ``access`` (read, write or readwrite) to what ``pattern`` matches."""

    access: Access
    pattern: str

    def permits(self, action: Action) -> bool:
        """Whether this grant covers ``action`` (``read`` or ``write``)."""
        return self.access == "readwrite" or self.access == action


def node_username(node_id: int) -> str:
    """Return the MQTT username of node ``node_id``: ``node-<id>``."""
    return f"node-{node_id}"


def host_username(host: int) -> str:
    """Return the MQTT username of host process ``host`` of a ``gossip up`` run: ``host-<j>``."""
    return f"host-{host}"


def mqtt_password(secret: str, username: str) -> str:
    """Return the MQTT password of ``username``: ``HMAC-SHA256(secret, username)`` in hex.

    Examples
    --------
    >>> len(mqtt_password("s3cret", "node-3"))
    64
    """
    return hmac.new(secret.encode(), username.encode(), hashlib.sha256).hexdigest()


def host_sizes(nodes: int, per_process: int) -> list[int]:
    """Split ``nodes`` into ceil(nodes / per_process) processes of nearly equal sizes.

    Raises
    ------
    ConfigError
        ``per_process`` is below 1.

    Examples
    --------
    >>> host_sizes(10, 4)
    [4, 3, 3]
    >>> host_sizes(3, 1)
    [1, 1, 1]
    """
    if per_process < 1:
        raise ConfigError(f"--nodes-per-process must be >= 1, got {per_process}")
    hosts = math.ceil(nodes / per_process)
    return [nodes // hosts + (j < nodes % hosts) for j in range(hosts)]


def host_blocks(nodes: int, per_process: int) -> list[range]:
    """Return the node ids of each host process of a run of ``nodes`` nodes, ``per_process``
    per process: host ``j`` holds the ``j``-th block (the rule of the module docstring).

    Examples
    --------
    >>> host_blocks(10, 4)
    [range(0, 4), range(4, 7), range(7, 10)]
    """
    blocks, first = [], 0
    for size in host_sizes(nodes, per_process):
        blocks.append(range(first, first + size))
        first += size
    return blocks


def account_of(node_id: int, nodes: int, per_process: int) -> str:
    """Return the MQTT username node ``node_id`` connects with: its host's account in host mode
    (``per_process > 1``), else its own; a node past the first ``nodes`` (one that joined a
    running cluster) has its own.

    Examples
    --------
    >>> [account_of(k, 10, 4) for k in (0, 3, 4, 9, 10)]
    ['host-0', 'host-0', 'host-1', 'host-2', 'node-10']
    >>> account_of(5, 10, 1)
    'node-5'
    """
    if per_process <= 1 or not 0 <= node_id < nodes:
        return node_username(node_id)
    # host_sizes: the first (nodes % hosts) blocks have one node more than the others.
    hosts = math.ceil(nodes / per_process)
    small, big = divmod(nodes, hosts)
    if node_id < big * (small + 1):
        return host_username(node_id // (small + 1))
    return host_username(big + (node_id - big * (small + 1)) // small)


_EVERY = Topics(ANY)
"""The topics of every cluster: a run's accounts hold for whichever cluster it names."""

_NODE_READS = (Grant("read", _EVERY.control), Grant("read", _EVERY.status))
"""What a node, or a host process for its nodes, receives: commands and the run's status."""


def acl_grants(nodes: int, per_process: int = 1) -> dict[str, tuple[Grant, ...]]:
    """Return the grants of a run with node ids ``0 .. nodes - 1``: username -> its grants.

    The table of the module docstring. With ``per_process > 1`` (host mode) the nodes have no
    accounts of their own: host ``j`` has one that may publish the state of the nodes of
    :func:`host_blocks` ``[j]`` and nothing else of theirs.

    Examples
    --------
    >>> acl_grants(1)["node-0"][0]
    Grant(access='write', pattern='gossip/+/node/0/state')
    >>> acl_grants(1)["operator"][0]
    Grant(access='write', pattern='gossip/+/submit/+')
    >>> [g.pattern for g in acl_grants(4, 2)["host-1"]][:2]
    ['gossip/+/node/2/state', 'gossip/+/node/3/state']
    """
    grants: dict[str, tuple[Grant, ...]] = {
        COORDINATOR: (Grant("readwrite", ALL),),
        # Submits runs to a standing coordinator and reads their results, nothing else: it
        # can neither stop nodes nor forge their state (coordinator.run.standing).
        OPERATOR: (
            Grant("write", _EVERY.submit()),
            Grant("read", _EVERY.result()),
            Grant("read", _EVERY.standing),
        ),
    }
    if per_process > 1:
        for j, block in enumerate(host_blocks(nodes, per_process)):
            writes = tuple(Grant("write", _EVERY.state(node)) for node in block)
            grants[host_username(j)] = (*writes, *_NODE_READS)
        return grants
    for node in range(nodes):
        grants[node_username(node)] = (Grant("write", _EVERY.state(node)), *_NODE_READS)
    return grants


def _valid_filter(pattern: str) -> bool:
    if not pattern or len(pattern) > _MAX_TOPIC or "#/" in pattern:
        return False
    levels = pattern.split("/")
    return not any(len(level) > 1 and ("+" in level or "#" in level) for level in levels)


def topic_matches(pattern: str, topic: str) -> bool:
    """Whether the topic name ``topic`` matches the filter ``pattern`` (``+`` and ``#``).

    As MQTT 3.1.1 section 4.7, mosquitto and aiomqtt's ``Topic.matches``: ``a/#`` also matches
    ``a``, a wildcard in the first level does not match a ``$`` topic, and a ``$share/<group>/``
    prefix of the filter is skipped. A topic name or a filter that is not valid matches nothing.

    Examples
    --------
    >>> topic_matches("gossip/+/node/3/state", "gossip/c/node/3/state")
    True
    >>> topic_matches("gossip/+/node/3/state", "gossip/c/node/2/state")
    False
    >>> topic_matches("gossip/#", "gossip"), topic_matches("#", "$SYS/uptime")
    (True, False)
    """
    if not topic or len(topic) > _MAX_TOPIC or "+" in topic or "#" in topic:
        return False  # not a topic name: a publish or a delivery never carries one
    if not _valid_filter(pattern):
        return False
    wanted = pattern.split("/")
    if topic.startswith("$") and wanted[0] in ("+", "#"):
        return False
    if wanted[0] == "$share":
        wanted = wanted[2:]
    levels = topic.split("/")
    for i, level in enumerate(levels):
        if i >= len(wanted):
            return False
        if wanted[i] == "#":
            return True
        if wanted[i] != "+" and wanted[i] != level:
            return False
    return len(wanted) == len(levels) or wanted[len(levels)] == "#"


def filter_within(pattern: str, subscription: str) -> bool:
    """Whether every topic the filter ``subscription`` matches is matched by ``pattern``.

    A subscription is allowed only where all it could receive is readable.

    Examples
    --------
    >>> filter_within("gossip/+/control", "gossip/lab/control")
    True
    >>> filter_within("gossip/+/control", "gossip/#")
    False
    >>> filter_within("gossip/#", "gossip/+/node/+/state")
    True
    """
    levels = pattern.split("/")
    wanted = subscription.split("/")
    for i, level in enumerate(levels):
        if level == "#":
            return True
        if i >= len(wanted) or wanted[i] == "#":
            return False
        if level != "+" and level != wanted[i]:  # a "+" there is wider than one name
            return False
    return len(wanted) == len(levels)


def may(
    grants: Mapping[str, tuple[Grant, ...]],
    username: str | None,
    topic: str,
    action: Action | Literal["subscribe"],
) -> bool:
    """Whether ``username`` may ``write`` (publish) or ``read`` (receive) ``topic``, or
    ``subscribe`` to the filter ``topic`` (allowed only if all it matches is readable).

    ``grants`` are :func:`acl_grants`, or the same read back from a broker's file. An
    anonymous client (``None``) or a user the grants do not list may do nothing.

    Examples
    --------
    >>> acl = acl_grants(3)
    >>> may(acl, "node-1", "gossip/c/node/1/state", "write")
    True
    >>> may(acl, "node-1", "gossip/c/node/2/state", "write")
    False
    >>> may(acl, "node-1", "gossip/#", "subscribe"), may(acl, None, "gossip/c/control", "read")
    (False, False)
    """
    if username is None:
        return False
    user_grants = grants.get(username, ())
    if action == "subscribe":
        return any(g.permits("read") and filter_within(g.pattern, topic) for g in user_grants)
    return any(g.permits(action) and topic_matches(g.pattern, topic) for g in user_grants)
