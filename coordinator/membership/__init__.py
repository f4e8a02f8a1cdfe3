"""Who may join a run and how: registration, its server, the handshakes, and the keys.

plan
    What registration hands out: the run's plan, who got which id, every node's bootstrap.
registry
    Registration as a sans-IO state machine (:class:`~coordinator.membership.registry.Registry`).
registrar
    The ZeroMQ ROUTER that drives it.
handshakes
    Which CURVE handshakes a start waits for.
security
    The run's keys and accounts (CurveZMQ and MQTT), loaded and checked.
"""
