"""amqtt plugins that enforce a run's MQTT passwords and ACL, from mosquitto's own files.

The rules are :mod:`gossip.wire.access`'s: the plugins read them back from the files that
:func:`coordinator.mqtt.auth.write_broker_auth` wrote for mosquitto, and decide with
:func:`gossip.wire.access.may`, so one ACL and one set of password hashes serve both brokers.
The embedded amqtt broker of :mod:`coordinator.local.broker` (an :class:`AccessBroker`) loads
both plugins by their dotted paths, each given one of the files.

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

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from amqtt.broker import Broker
from amqtt.contexts import Action
from amqtt.plugins.base import BaseAuthPlugin, BaseTopicPlugin

from continuized.coordinator.mqtt.auth import parse_acl, parse_password_file, verify_password
from continuized.gossip.wire.access import may

__all__ = ["AccessBroker", "AclFilePlugin", "PasswordFilePlugin"]

_ACTIONS: dict[Any, Literal["read", "write", "subscribe"]] = {
    Action.PUBLISH: "write",
    Action.RECEIVE: "read",
    Action.SUBSCRIBE: "subscribe",
}


class PasswordFilePlugin(BaseAuthPlugin):  # type: ignore[misc]  # amqtt ships no types
    """Admit only a listed user with the right password (mosquitto's ``$7$`` hashes)."""

    @dataclass
    class Config:
        """``password_file``: the path :func:`~coordinator.mqtt.auth.write_broker_auth` wrote."""

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
        """``acl_file``: the path :func:`~coordinator.mqtt.auth.write_broker_auth` wrote."""

        acl_file: str = ""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self._grants = parse_acl(Path(self.config.acl_file).read_text())

    def allows(self, session: Any, topic: str | None, action: Any) -> bool:
        """Whether the session's user may do ``action`` on ``topic`` (unknown actions: no)."""
        kind = _ACTIONS.get(action)
        if session is None or topic is None or kind is None:
            return False
        return may(self._grants, session.username, topic, kind)

    async def topic_filtering(
        self, *, session: Any = None, topic: str | None = None, action: Any = None
    ) -> bool:
        """amqtt's hook: :meth:`allows`."""
        return self.allows(session, topic, action)


class _Subscriptions(dict[str, list[Any]]):
    """amqtt's filter -> subscribers table, iterated over a snapshot.

    amqtt 0.12 iterates it across awaits (each broadcast, each client's connection): a client
    subscribing meanwhile made the iteration fail ("dictionary changed size during iteration"),
    dropping a message for the subscribers not reached yet or ending a client's session.
    """

    def __iter__(self) -> Iterator[str]:
        return iter(list(super().__iter__()))

    def items(self) -> Any:  # a list, not a live view
        return list(super().items())


class AccessBroker(Broker):  # type: ignore[misc]  # amqtt ships no types
    """amqtt's broker, with the ACL applied where amqtt 0.12 skips it or trips over itself.

    * Topic checks ask :class:`AclFilePlugin` inline, without yielding to the loop (amqtt runs
      each topic plugin as a task; were this hook renamed in another amqtt, the plugin would
      still be asked through amqtt's own path).
    * Retained messages are replayed to a client only for its own subscriptions, and only those
      its user may read: amqtt replays them unchecked, and on every connection for every
      client's subscriptions.
    * The subscriptions are iterated over snapshots (:class:`_Subscriptions`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._subscriptions = _Subscriptions()

    def _acl(self) -> AclFilePlugin | None:
        plugin = self.plugins_manager.get_plugin("AclFilePlugin")
        return plugin if isinstance(plugin, AclFilePlugin) else None

    async def _topic_filtering(self, session: Any, topic: str, action: Any) -> bool:
        acl = self._acl()
        if acl is None:  # an anonymous broker (gossip up --insecure): amqtt's own path
            return bool(await super()._topic_filtering(session, topic, action))
        return acl.allows(session, topic, action)

    async def _publish_retained_messages_for_subscription(
        self, subscription: tuple[str, int], session: Any
    ) -> None:
        topic_filter, qos = subscription
        if all(s is not session for s, _ in self._subscriptions.get(topic_filter, ())):
            return  # another client's subscription
        handler = self._get_handler(session)
        acl = self._acl()
        for topic, retained in list(self._retained_messages.items()):
            if not self._matches(topic, topic_filter):
                continue
            if acl is not None and not acl.allows(session, topic, Action.RECEIVE):
                continue
            if handler is not None:
                granted = min(qos, retained.qos or qos)
                await handler.mqtt_publish(retained.topic, retained.data, granted, retain=True)
