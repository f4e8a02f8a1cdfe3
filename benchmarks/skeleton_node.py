"""A skeleton node for :mod:`bench_floor`: a node's sockets, clocks and lock, and nothing else.

Run as ``python benchmarks/skeleton_node.py CONFIG_JSON``. Like a node it has its own OS
process, a uvloop event loop, a ZeroMQ ROUTER that serves and a DEALER per neighbour that
initiates, each socket watched through its ``zmq.FD`` and drained at once; Poisson ticks per
edge end at ``rate * P_e / 2``; and a lock: while its own request is unanswered, its ticks
wait (none is dropped) and fire as soon as the reply comes. A request is answered at once with
a frame of a reply's size. There is no protocol state, no value, no metrics and no MQTT: what
this process costs per exchange is what the node's architecture costs on this machine before
any of the node's own work.

CONFIG_JSON: ``{"id", "port", "peers": [[peer_port, edge_rate], ...], "secret", "public",
"start", "stop", "end"}`` (wall-clock seconds; ``secret``/``public``: a CurveZMQ key pair as
Z85 strings, or null for plain sockets, and ``peers`` then carry the server keys too). It
prints one JSON line when done: exchanges it completed as initiator and served, the process's
CPU seconds (every thread) and its event loop's voluntary context switches, between ``start``
and ``stop``.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import sys
import time
from typing import Any, cast

import uvloop
import zmq

_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE_NOBLOCK = int(zmq.SNDMORE) | _NOBLOCK
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_REPLY = b"r" * 48  # about a Reply frame of one scalar


class Skeleton:
    """One skeleton node (module header)."""

    def __init__(self, config: dict[str, Any], request: bytes) -> None:
        self.loop = asyncio.get_running_loop()
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.request = request
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        if config["secret"] is not None:
            self.router.curve_server = True
            self.router.curve_secretkey = config["secret"].encode()
        self.router.bind(f"tcp://127.0.0.1:{config['port']}")
        self.dealers: list[zmq.Socket[bytes]] = []
        self.weights: list[float] = []
        for peer in config["peers"]:
            dealer = self.ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            if config["secret"] is not None:
                dealer.curve_serverkey = peer[2].encode()
                dealer.curve_publickey = config["public"].encode()
                dealer.curve_secretkey = config["secret"].encode()
            dealer.connect(f"tcp://127.0.0.1:{peer[0]}")
            self.dealers.append(dealer)
            self.weights.append(float(peer[1]))
        self.rate = sum(self.weights)  # this node's ticks per second, all its edge ends
        self.engaged = False
        self.waiting = 0
        self.completed = 0
        self.served = 0
        self.rng = random.Random(config["id"])
        self.loop.add_reader(cast(int, self.router.getsockopt(zmq.FD)), self.drain_router)
        for dealer in self.dealers:
            self.loop.add_reader(cast(int, dealer.getsockopt(zmq.FD)), self.drain_dealer, dealer)

    def drain_router(self) -> None:
        """Answer every request queued on the ROUTER."""
        router = self.router
        while cast(int, router.getsockopt(_EVENTS)) & _POLLIN:
            route, _ = router.recv_multipart(_NOBLOCK)
            router.send(route, _SNDMORE_NOBLOCK)
            router.send(_REPLY, _NOBLOCK)
            self.served += 1

    def drain_dealer(self, dealer: zmq.Socket[bytes]) -> None:
        """Take every reply queued on ``dealer``: each frees the lock, and a waiting tick fires."""
        while cast(int, dealer.getsockopt(_EVENTS)) & _POLLIN:
            dealer.recv(_NOBLOCK)
            self.completed += 1
            self.engaged = False
            if self.waiting:
                self.waiting -= 1
                self.initiate()

    def initiate(self) -> None:
        """Start an exchange on an edge drawn by its rate, and hold the lock until its reply."""
        dealer = self.rng.choices(self.dealers, self.weights)[0]
        self.engaged = True
        dealer.send(self.request, _NOBLOCK)
        self.drain_dealer(dealer)  # the send may have eaten the FD's edge

    def tick(self, when: float) -> None:
        """One tick of this node's clocks: initiate, or wait for the lock; schedule the next."""
        if self.engaged:
            self.waiting += 1
        else:
            self.initiate()
        when += self.rng.expovariate(self.rate)
        self.loop.call_at(when, self.tick, when)


async def run(config: dict[str, Any], request: bytes) -> dict[str, Any]:
    """Serve and tick from ``start`` to ``end``; return the figures between start and stop."""
    node = Skeleton(config, request)
    to_loop = node.loop.time() - time.time()  # wall clock -> the loop's clock
    first = config["start"] - 1.0 + node.rng.expovariate(node.rate)  # ticking before start
    node.loop.call_at(first + to_loop, node.tick, first + to_loop)
    await asyncio.sleep(max(0.0, config["start"] - time.time()))
    before = (node.completed, node.served, time.process_time(), _switches())
    await asyncio.sleep(max(0.0, config["stop"] - time.time()))
    after = (node.completed, node.served, time.process_time(), _switches())
    await asyncio.sleep(max(0.0, config["end"] - time.time()))  # serve the others' last ones
    return {
        "id": config["id"],
        "completed": after[0] - before[0],
        "served": after[1] - before[1],
        "cpu": after[2] - before[2],
        "switches": after[3] - before[3],
    }


def _switches() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw


def main() -> None:
    """Run one skeleton node from the JSON config in ``sys.argv[1]``; print its figures."""
    config = json.loads(sys.argv[1])
    request = bytes.fromhex(config["request"])
    print(json.dumps(uvloop.run(run(config, request))), flush=True)


if __name__ == "__main__":
    main()
