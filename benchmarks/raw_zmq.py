"""The raw pyzmq baseline the cluster benchmarks measure against, in one place.

A ROUTER echo process (run with ``python -c ECHO_SERVER tcp://... [SECRET]``; a ``quit`` frame
ends it) and a frame of an exchange request's size, so that a benchmark's raw round trips move
the same bytes as the node's. With a Z85 secret key the echo is a CurveZMQ server, and the
round trips are encrypted as a secure node's are (without a ZAP handler: the handshake is not
what is measured).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator

import msgpack
import zmq
import zmq.asyncio

from continuized.coordinator.machine.ports import free_port

ECHO_SERVER = """
import sys, zmq
ctx = zmq.Context()
sock = ctx.socket(zmq.ROUTER)
if len(sys.argv) > 2:
    sock.curve_server = True
    sock.curve_secretkey = sys.argv[2].encode()
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


@contextlib.asynccontextmanager
async def echo_dealer(
    warmup: int = 200, *, secure: bool = False
) -> AsyncIterator[tuple[zmq.asyncio.Socket, int]]:
    """An asyncio DEALER connected to an echo ROUTER in another process, warmed up.

    ``secure``: over CurveZMQ. Yields the socket and the echo process's pid; the echo process
    is stopped on exit.
    """
    address = f"tcp://127.0.0.1:{free_port()}"
    server_public, server_secret = zmq.curve_keypair() if secure else (b"", b"")
    key = [server_secret.decode()] if secure else []
    echo = await asyncio.create_subprocess_exec(sys.executable, "-c", ECHO_SERVER, address, *key)
    ctx = zmq.asyncio.Context()
    try:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if secure:
            sock.curve_serverkey = server_public
            sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()
        sock.connect(address)
        for _ in range(warmup):  # also waits for the echo process to bind
            await sock.send(REQUEST_FRAME)
            await sock.recv()
        yield sock, echo.pid
        await sock.send(b"quit")
        sock.close(0)
    finally:
        ctx.destroy(0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(echo.wait(), 5)
        if echo.returncode is None:
            echo.kill()
            await echo.wait()


async def in_flight_rate(sock: zmq.asyncio.Socket, round_trips: int, window: int = 30) -> float:
    """Round trips per second through ``sock`` (an :func:`echo_dealer`) with ``window`` frames
    kept in flight, as ``window`` nodes would have: the raw capacity."""
    start = time.perf_counter()
    for _ in range(window):
        await sock.send(REQUEST_FRAME)
    for _ in range(round_trips - window):
        await sock.recv()
        await sock.send(REQUEST_FRAME)
    for _ in range(window):
        await sock.recv()
    return round_trips / (time.perf_counter() - start)


async def capacity_samples(
    samples: int, round_trips: int = 20_000, window: int = 30
) -> list[float]:
    """``samples`` raw capacities (:func:`in_flight_rate` through a fresh
    :func:`echo_dealer`), sorted: the machine's baseline, measured in the benchmark's run."""
    async with echo_dealer(warmup=200) as (sock, _):
        return sorted([await in_flight_rate(sock, round_trips, window) for _ in range(samples)])
