"""The coordinator: registration and bootstrap of the nodes, metrics, and the local launcher.

Modules
-------
state
    :class:`~coordinator.state.ClusterState`, the in-process view the dashboard serves.
broker
    The embedded MQTT broker of ``gossip up`` (a ``mosquitto`` process, or in-process amqtt).
"""

__all__: list[str] = []
