"""How a node reaches its peers: the transport interface and its implementations.

interface
    :class:`~node.transport.interface.Transport`, what the daemon talks through.
zeromq, sockets, addresses, curve, keypool, colocation, departures
    The ZeroMQ transport and its sockets, the address it gives its peers, its CurveZMQ keys
    and ZAP handler, keys made ahead for the nodes of a host, ``inproc`` between nodes of one
    process, and work run once a zero-copy frame has left.
fake, faults
    An in-memory transport, and a wrapper that drops, duplicates and delays frames.
"""
