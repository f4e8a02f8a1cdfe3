"""The coordinator's MQTT side: its broker link and the broker's access rules.

link
    The coordinator's MQTT connection (:class:`~coordinator.mqtt.link.MqttLink`).
auth, amqtt_access
    The adapters of the access policy (:mod:`gossip.wire.access`): its password file and ACL
    in mosquitto's syntax, which both embedded brokers enforce (mosquitto reads the files,
    amqtt through its plugins).
"""
