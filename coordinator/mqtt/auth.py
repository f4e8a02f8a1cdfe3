"""MQTT access control of a run: a password per role, an ACL per node or host, for either broker.

Usernames: ``coordinator``, ``operator`` (submits runs to a standing coordinator),
``node-<id>`` for the node of id ``<id>``, and, in host mode, ``host-<j>`` for host process
``<j>`` and all its nodes (:func:`host_blocks`). Every password is
``HMAC-SHA256(mqtt secret, username)`` (:func:`gossip.files.keys.mqtt_password`): the coordinator
holds the secret and hands each node the password of its own username in the bootstrap.

The ACL is defined once, as data (:func:`acl_grants`): the coordinator reads and writes
everything under ``gossip/``; node ``<id>`` may publish only ``gossip/<cluster>/node/<id>/state``
and read the control and status topics; a host account may publish exactly its own nodes'
state topics and read what a node reads, so one MQTT connection serves a whole host process
while no process can write another process's nodes' state. :func:`write_broker_auth` writes it
as mosquitto's ``acl_file`` and the passwords as mosquitto's ``password_file`` (PBKDF2 hashes);
mosquitto reads both, and so does the embedded amqtt broker (:mod:`coordinator.mqtt.amqtt_access`),
through :func:`parse_acl`, :func:`parse_password_file` and :func:`may` here. Topics name nodes
by id while usernames carry a ``node-`` prefix, so the ACL lists each node (a mosquitto
``pattern`` with ``%u`` would need usernames equal to the ids). Anonymous clients are refused
by both brokers.

Which ids a host process holds (the one rule, :func:`host_blocks`): ``gossip up
--nodes-per-process K`` splits N nodes into ``ceil(N / K)`` processes of nearly equal sizes
(:func:`host_sizes`) and gives host ``j`` the next ``size_j`` keys
``node-<k>`` in order; the registry numbers nodes by the natural order of their names, so the
node of key ``node-<k>`` gets id ``k``, and host ``j`` holds the ``j``-th contiguous block of
ids. The coordinator hands each node of a block its host's password
(:meth:`coordinator.membership.security.Security.node_broker`): the block must be one process, as
``gossip up`` starts it. A node started by hand (``gossip node``, keys of ``gossip keys init``)
keeps its own ``node-<id>`` account.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aiomqtt import Topic

from continuized.gossip.errors import ConfigError
from continuized.gossip.files.keys import COORDINATOR, OPERATOR, mqtt_password, node_username
from continuized.gossip.wire.pubsub import ALL, ANY, Topics

__all__ = [
    "Grant",
    "account_of",
    "acl_grants",
    "filter_within",
    "host_blocks",
    "host_sizes",
    "host_username",
    "may",
    "mosquitto_acl",
    "mosquitto_password_line",
    "parse_acl",
    "parse_password_file",
    "topic_matches",
    "verify_password",
    "write_broker_auth",
    "write_mosquitto_auth",
]

_ITERATIONS = 101  # mosquitto_passwd's default for its $7$ (PBKDF2-SHA512) hashes

Access = Literal["read", "write", "readwrite"]
Action = Literal["read", "write"]
_ACCESS: dict[str, Access] = {"read": "read", "write": "write", "readwrite": "readwrite"}


@dataclass(frozen=True, slots=True)
class Grant:
    """One ACL line: ``access`` (read, write or readwrite) to the topics ``pattern`` matches."""

    access: Access
    pattern: str

    def permits(self, action: Action) -> bool:
        """Whether this grant covers ``action`` (``read`` or ``write``)."""
        return self.access == "readwrite" or self.access == action


def host_username(host: int) -> str:
    """Return the MQTT username of host process ``host`` of a ``gossip up`` run: ``host-<j>``."""
    return f"host-{host}"


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


def _node_reads() -> tuple[Grant, ...]:
    return (Grant("read", _EVERY.control), Grant("read", _EVERY.status))


def acl_grants(nodes: int, per_process: int = 1) -> dict[str, tuple[Grant, ...]]:
    """Return the ACL of a run with node ids ``0 .. nodes - 1``: username -> its grants.

    The one definition of who may do what; both brokers enforce it. With ``per_process > 1``
    (host mode) the nodes have no accounts of their own: host ``j`` has one that may publish
    the state of the nodes of :func:`host_blocks` ``[j]`` and nothing else of theirs.

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
            grants[host_username(j)] = (*writes, *_node_reads())
        return grants
    for node in range(nodes):
        grants[node_username(node)] = (
            Grant("write", _EVERY.state(node)),
            *_node_reads(),
        )
    return grants


def mosquitto_acl(nodes: int, per_process: int = 1) -> str:
    """Return :func:`acl_grants` as mosquitto ``acl_file`` text.

    Examples
    --------
    >>> print(mosquitto_acl(1))  # doctest: +NORMALIZE_WHITESPACE
    # Generated by gossip: each node publishes only its own state.
    user coordinator
    topic readwrite gossip/#
    <BLANKLINE>
    user operator
    topic write gossip/+/submit/+
    topic read gossip/+/result/+
    topic read gossip/+/standing
    <BLANKLINE>
    user node-0
    topic write gossip/+/node/0/state
    topic read gossip/+/control
    topic read gossip/+/coordinator/status
    <BLANKLINE>
    """
    lines = ["# Generated by gossip: each node publishes only its own state."]
    for user, grants in acl_grants(nodes, per_process).items():
        lines.append(f"user {user}")
        lines += [f"topic {g.access} {g.pattern}" for g in grants]
        lines.append("")
    return "\n".join(lines)


def parse_acl(text: str) -> dict[str, tuple[Grant, ...]]:
    """Read an ``acl_file`` written by :func:`mosquitto_acl` back into grants.

    Only the lines this module writes are understood (``user``, ``topic [access] pattern``,
    comments); anything else is refused rather than half-enforced.

    Raises
    ------
    ConfigError
        A line of another form, or a ``topic`` before any ``user``.

    Examples
    --------
    >>> parse_acl(mosquitto_acl(3)) == acl_grants(3)
    True
    """
    grants: dict[str, list[Grant]] = {}
    user: str | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if words[0] == "user" and len(words) == 2:
            user = words[1]
            grants.setdefault(user, [])
            continue
        if words[0] == "topic" and user is not None and len(words) in (2, 3):
            access = _ACCESS.get(words[1] if len(words) == 3 else "readwrite")  # its default
            if access is not None:
                grants[user].append(Grant(access, words[-1]))
                continue
        raise ConfigError(
            f"ACL line {number} {raw!r} is not 'user NAME' or 'topic [read|write|readwrite] "
            "PATTERN' under a user; write the file with "
            "continuized.coordinator.mqtt.auth.mosquitto_acl"
        )
    return {name: tuple(lines) for name, lines in grants.items()}


def topic_matches(pattern: str, topic: str) -> bool:
    """Whether the topic name ``topic`` matches the filter ``pattern`` (``+`` and ``#``).

    As MQTT 3.1.1 section 4.7 and mosquitto: ``a/#`` also matches ``a``, and a wildcard in the
    first level does not match a ``$`` topic. A topic name that is not valid matches nothing.

    Examples
    --------
    >>> topic_matches("gossip/+/node/3/state", "gossip/c/node/3/state")
    True
    >>> topic_matches("gossip/+/node/3/state", "gossip/c/node/2/state")
    False
    >>> topic_matches("gossip/#", "gossip"), topic_matches("#", "$SYS/uptime")
    (True, False)
    """
    # aiomqtt matches the levels; MQTT's one rule it leaves out is the "$" topics'.
    if topic.startswith("$") and pattern.split("/", 1)[0] in ("+", "#"):
        return False
    try:
        return Topic(topic).matches(pattern)
    except ValueError:  # not a valid topic name (a wildcard in it, or too long)
        return False


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

    An anonymous client (``None``) or a user the ACL does not list may do nothing.

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


def mosquitto_password_line(username: str, password: str, salt: bytes | None = None) -> str:
    """Return one ``password_file`` line, hashed as ``mosquitto_passwd`` does (``$7$``)."""
    salt = os.urandom(12) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, _ITERATIONS)
    b64 = base64.b64encode
    return f"{username}:$7${_ITERATIONS}${b64(salt).decode()}${b64(digest).decode()}"


def parse_password_file(text: str) -> dict[str, str]:
    """Return username -> hash of a ``password_file`` (comments and blank lines skipped).

    Raises
    ------
    ConfigError
        A line that is not ``username:$7$iterations$salt$hash``.
    """
    hashes: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, hashed = line.partition(":")
        if not (sep and user and hashed.startswith("$7$") and hashed.count("$") == 4):
            raise ConfigError(
                f"password file line {number} of user {user!r} is not 'user:$7$...' (a "
                "PBKDF2-SHA512 hash); write it with "
                "continuized.coordinator.mqtt.auth.mosquitto_password_line"
            )
        hashes[user] = hashed
    return hashes


def verify_password(hashed: str, password: str) -> bool:
    """Whether ``password`` is the one ``hashed`` (a ``$7$`` line's hash) was made from.

    Examples
    --------
    >>> line = mosquitto_password_line("node-0", "pw")
    >>> verify_password(line.split(":", 1)[1], "pw"), verify_password(line.split(":", 1)[1], "x")
    (True, False)
    """
    try:
        _, kind, iterations, salt, digest = hashed.split("$")
        expected = base64.b64decode(digest, validate=True)
        derived = hashlib.pbkdf2_hmac(
            "sha512", password.encode(), base64.b64decode(salt, validate=True), int(iterations)
        )
    except (ValueError, binascii.Error):  # not a hash this module wrote: no password matches
        return False
    return kind == "7" and hmac.compare_digest(derived, expected)


def write_broker_auth(
    directory: Path, secret: str, nodes: int, per_process: int = 1
) -> tuple[Path, Path]:
    """Write ``passwd`` and ``acl`` for ``nodes`` node ids into ``directory``; return both.

    ``per_process > 1``: the accounts of host mode's processes (:func:`acl_grants`) instead of
    the nodes' own.

    Both brokers read these two files. The password file holds only salted hashes; it is
    readable by the broker's user (0644) so that a mosquitto container running as another
    user can read it.
    """
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o755)
    users = list(acl_grants(nodes, per_process))
    passwd = directory / "passwd"
    passwd.write_text(
        "".join(mosquitto_password_line(u, mqtt_password(secret, u)) + "\n" for u in users)
    )
    passwd.chmod(0o644)
    acl = directory / "acl"
    acl.write_text(mosquitto_acl(nodes, per_process))
    acl.chmod(0o644)
    return passwd, acl


write_mosquitto_auth = write_broker_auth  # its name when only mosquitto read the files


def host_sizes(nodes: int, per_process: int) -> list[int]:
    """Split ``nodes`` into ceil(nodes / per_process) processes of nearly equal sizes.

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
