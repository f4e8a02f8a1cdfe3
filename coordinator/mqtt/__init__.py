"""The coordinator's MQTT side: its broker link and the broker's access rules.

link
    The coordinator's MQTT connection (:class:`~coordinator.mqtt.link.MqttLink`).
auth, amqtt_access
    The one password file and ACL both embedded brokers enforce (mosquitto reads the files,
    amqtt through its plugins).
"""
