"""The raw pyzmq baseline the cluster benchmarks measure against, in one place.

A ROUTER echo process (run with ``python -c ECHO_SERVER tcp://...``; a ``quit`` frame ends it)
and a frame of an exchange request's size, so that a benchmark's raw round trips move the same
bytes as the node's.
"""

from __future__ import annotations

import msgpack

ECHO_SERVER = """
import sys, zmq
ctx = zmq.Context()
sock = ctx.socket(zmq.ROUTER)
sock.bind(sys.argv[1])
while True:
    frames = sock.recv_multipart()
    if frames[-1] == b"quit":
        break
    sock.send_multipart(frames)
"""

REQUEST_FRAME: bytes = msgpack.packb(
    {
        "v": 1,
        "type": "request",
        "src": 3,
        "edge": 7,
        "seq": 123,
        "ack": 122,
        "t": 1234.5,
        "x": [0.123456789],
        "z": [0.987654321],
    }
)
"""A msgpack frame of the size of an exchange request (one scalar value)."""
