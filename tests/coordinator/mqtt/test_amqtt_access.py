"""coordinator.mqtt.amqtt_access: what the embedded amqtt broker does beyond amqtt's own code.

The access control itself is tested against both brokers in test_security.py.
"""

from __future__ import annotations

from continuized.coordinator.mqtt.amqtt_access import _Subscriptions


def test_the_subscription_table_can_change_while_it_is_iterated() -> None:
    # amqtt 0.12 iterates it across awaits while clients subscribe: a plain dict raised
    # "dictionary changed size during iteration" and dropped a message (or a session).
    table = _Subscriptions({"a/#": [], "b/+": []})
    seen = []
    for topic in table:
        table[f"{topic}/new"] = []
        seen.append(topic)
    for topic, _ in table.items():
        table.pop(topic)
    assert seen == ["a/#", "b/+"]
    assert table == {}
