"""The coordinator's key material: its CURVE key, the allow-list and the MQTT secret.

Loaded once from the coordinator's key directory (``gossip keys init`` writes
``DIR/coordinator``; see :mod:`gossip.files.keys`). It decides three things:

* who may register, and under which name (the allow-list; :mod:`coordinator.membership.registrar`);
* which public keys each node learns for its neighbours
  (:func:`coordinator.membership.plan.build_bootstraps`);
* the MQTT credentials: the coordinator's own, and the ones each node gets in its bootstrap
  (``node-<id>``, or in host mode its host process's ``host-<j>``, and the derived password),
  when the directory holds an MQTT secret.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

from continuized.gossip.files.keys import load_allow_list, load_identity, load_mqtt_secret
from continuized.gossip.wire.access import COORDINATOR, account_of, mqtt_password

__all__ = ["Security", "load_security", "with_credentials"]


def with_credentials(url: str, username: str, password: str) -> str:
    """Return ``url`` (``mqtt[s]://host:port``) with ``username:password@`` in it.

    Examples
    --------
    >>> with_credentials("mqtt://127.0.0.1:1883", "node-3", "pw")
    'mqtt://node-3:pw@127.0.0.1:1883'
    """
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{quote(username, safe='')}:{quote(password, safe='')}@{netloc}"


@dataclass(frozen=True, slots=True)
class Security:
    """What a secured coordinator knows.

    Attributes
    ----------
    public, secret : str
        The coordinator's CURVE key pair (Z85).
    allowed : dict of str to str
        Node name -> public key: the only nodes that may register, each under its name.
    mqtt_secret : str
        Secret the MQTT passwords derive from (``""``: the broker URL's credentials are used
        as they are, by everyone).
    nodes, per_process : int
        Host mode (``per_process > 1``, set by ``gossip up --nodes-per-process``): the run's
        ``nodes`` nodes connect with their host process's account
        (:func:`gossip.wire.access.account_of`), so the nodes of a process share its one
        connection. ``1``: each node has its own.
    """

    public: str
    secret: str = field(repr=False)
    allowed: dict[str, str]
    mqtt_secret: str = field(default="", repr=False)
    nodes: int = 0
    per_process: int = 1

    def coordinator_broker(self, url: str) -> str:
        """The broker URL the coordinator connects with (its own credentials if derivable)."""
        if not url or not self.mqtt_secret or urlsplit(url).username:
            return url
        return with_credentials(url, COORDINATOR, mqtt_password(self.mqtt_secret, COORDINATOR))

    def node_broker(self, url: str, node_id: int) -> str:
        """The broker URL node ``node_id`` gets in its bootstrap (its account's credentials)."""
        if not url or not self.mqtt_secret:
            return url
        user = account_of(node_id, self.nodes, self.per_process)
        return with_credentials(url, user, mqtt_password(self.mqtt_secret, user))


def load_security(directory: Path) -> Security:
    """Load the coordinator's key directory (``DIR/coordinator`` of ``gossip keys init``).

    Raises
    ------
    ConfigError
        A file is missing, unreadable, too open or malformed (the message names it).
    """
    identity = load_identity(directory)
    allowed = load_allow_list(directory / "allow.json")
    secret_path = directory / "mqtt.secret"
    mqtt_secret = load_mqtt_secret(secret_path) if secret_path.exists() else ""
    return Security(identity.public, identity.secret, allowed, mqtt_secret)
