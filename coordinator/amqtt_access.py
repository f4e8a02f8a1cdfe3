"""amqtt plugins that enforce a run's MQTT passwords and ACL, from mosquitto's own files.

The embedded amqtt broker of :mod:`coordinator.broker` loads both plugins by their dotted
paths, each given one file that :func:`coordinator.mqtt_auth.write_broker_auth` wrote for
mosquitto: so one ACL and one set of password hashes serve both brokers.

* :class:`PasswordFilePlugin` admits a client only with a username in ``password_file`` and
  the password its PBKDF2 hash was made from; an anonymous client is refused (CONNACK 5).
* :class:`AclFilePlugin` applies ``acl_file``: a publish the ACL does not allow is dropped
  (a QoS 1 one still gets its PUBACK, as MQTT 3.1.1 gives no other answer), a message goes
  only to subscribers who may read its topic, and a subscription is refused (SUBACK 0x80)
  unless every topic it matches is readable -- stricter than mosquitto 2.0, which grants any
  subscription and filters each message: amqtt would otherwise replay retained messages to a
  subscription unchecked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from amqtt.contexts import Action
from amqtt.plugins.base import BaseAuthPlugin, BaseTopicPlugin

from coordinator.mqtt_auth import may, parse_acl, parse_password_file, verify_password

__all__ = ["AclFilePlugin", "PasswordFilePlugin"]

_ACTIONS: dict[Any, Literal["read", "write", "subscribe"]] = {
    Action.PUBLISH: "write",
    Action.RECEIVE: "read",
    Action.SUBSCRIBE: "subscribe",
}


class PasswordFilePlugin(BaseAuthPlugin):  # type: ignore[misc]  # amqtt ships no types
    """Admit only a listed user with the right password (mosquitto's ``$7$`` hashes)."""

    @dataclass
    class Config:
        """``password_file``: the path :func:`~coordinator.mqtt_auth.write_broker_auth` wrote."""

        password_file: str = ""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self._hashes = parse_password_file(Path(self.config.password_file).read_text())

    async def authenticate(self, *, session: Any) -> bool:
        """Whether the session's username is listed and its password matches the hash."""
        hashed = self._hashes.get(session.username) if session.username else None
        return hashed is not None and verify_password(hashed, session.password or "")


class AclFilePlugin(BaseTopicPlugin):  # type: ignore[misc]  # amqtt ships no types
    """Allow a publish, a delivery or a subscription only as the ACL file says."""

    @dataclass
    class Config:
        """``acl_file``: the path :func:`~coordinator.mqtt_auth.write_broker_auth` wrote."""

        acl_file: str = ""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self._grants = parse_acl(Path(self.config.acl_file).read_text())

    async def topic_filtering(
        self, *, session: Any = None, topic: str | None = None, action: Any = None
    ) -> bool:
        """Whether the session's user may do ``action`` on ``topic`` (unknown actions: no)."""
        kind = _ACTIONS.get(action)
        if session is None or topic is None or kind is None:
            return False
        return may(self._grants, session.username, topic, kind)
