"""How a node reaches its peers: the transport interface and its implementations.

interface
    :class:`~node.transport.interface.Transport`, what the daemon talks through.
zeromq, curve, colocation, departures
    The ZeroMQ transport, its CurveZMQ keys and ZAP handler, ``inproc`` between nodes of one
    process, and work run once a zero-copy frame has left.
fake, faults
    An in-memory transport, and a wrapper that drops, duplicates and delays frames.
"""
