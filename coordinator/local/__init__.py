"""What ``gossip up`` starts on this machine: a broker, the coordinator and the node processes.

settings, launcher
    ``gossip up``'s settings, checked before anything starts, and the run itself
    (:func:`~coordinator.local.launcher.run_up`).
broker
    The embedded broker (mosquitto or in-process amqtt), or the reach of an external one.
forking, node_commands, supervise
    The node fork server, the nodes' command lines, and the restart policy and run record.
"""
