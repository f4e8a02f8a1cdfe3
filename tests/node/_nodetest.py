"""Helpers for node tests: bootstraps for a whole topology, and the error of final reports."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import zmq
import zmq.asyncio

from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.mixing import mix
from continuized.gossip.wire.schema import (
    Beat,
    BeatBatch,
    Bootstrap,
    BootstrapBatch,
    Neighbor,
    Register,
    RegisterBatch,
    decode,
    encode,
)

if TYPE_CHECKING:
    from continuized.node import Node


def bootstraps(
    spec: str,
    algorithm: str,
    rate: float,
    epoch: float,
    values: np.ndarray,
    addresses: list[str],
    broker: str = "",
    metrics_period: float = 0.5,
) -> list[Bootstrap]:
    """What a coordinator would send each node of ``spec``."""
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    p = gossip_params(algorithm, q.mu_gossip, q.r_max)
    values = values.reshape(topo.n, -1)
    return [
        Bootstrap(
            node_id=v,
            cluster="test",
            algorithm=algorithm,
            eta=p.eta,
            c=p.c,
            theta=p.theta,
            epoch=epoch,
            rate=rate,
            neighbors=tuple(
                Neighbor(peer, addresses[peer], e, float(topo.probs[e]))
                for e, peer in topo.incident(v)
            ),
            initial_value=tuple(values[v].tolist()),
            broker=broker,
            metrics_period=metrics_period,
            dim=values.shape[1],
        )
        for v in range(topo.n)
    ]


def common_time(reports: list[dict[str, Any]], eta: float) -> tuple[float, np.ndarray]:
    """Mix every report's x to the latest report's t; return (t, x of shape (n, dim))."""
    t = max(r["t"] for r in reports)
    xs = []
    for r in sorted(reports, key=lambda r: r["node"]):
        x, _ = mix(np.array(r["x"]), np.array(r["z"]), eta, t - r["t"])
        xs.append(x)
    return t, np.array(xs)


class FakeCoordinator:
    """A tiny coordinator for node tests: a ROUTER that answers registrations (contract C2).

    Waits for ``n`` registrations, numbers the nodes by name, and sends each its Bootstrap;
    after that, answers a re-registration under a known name with the same Bootstrap.
    """

    def __init__(
        self,
        spec: str,
        algorithm: str,
        rate: float,
        values: np.ndarray | None = None,
        broker: str = "",
        start_in: float = 0.5,
    ):
        self.spec, self.algorithm, self.rate = spec, algorithm, rate
        self.values, self.broker, self.start_in = values, broker, start_in
        self.ctx = zmq.asyncio.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        self.registers: dict[str, Register] = {}
        self.boots: dict[str, Bootstrap] = {}
        self.reregistered: list[str] = []

    async def bootstrap(self, n: int) -> list[Bootstrap]:
        """Collect ``n`` registrations, answer them all, and return the bootstraps by id.

        A host process's batch (``RegisterBatch``) is answered with one ``BootstrapBatch``."""
        routes: dict[str, bytes] = {}
        batched: set[str] = set()
        while len(routes) < n:
            route, frame = await self.router.recv_multipart()
            msg = decode(frame)
            assert isinstance(msg, Register | RegisterBatch)
            regs = msg.nodes if isinstance(msg, RegisterBatch) else (msg,)
            for reg in regs:
                routes[reg.name] = route
                self.registers[reg.name] = reg
                if isinstance(msg, RegisterBatch):
                    batched.add(reg.name)
                else:
                    batched.discard(reg.name)
        names = sorted(routes)
        addresses = [self.registers[name].address for name in names]
        if self.values is None:  # the nodes' own values (--value)
            self.values = np.array([self.registers[name].value for name in names])
        boots = bootstraps(
            self.spec,
            self.algorithm,
            self.rate,
            time.time() + self.start_in,
            self.values,
            addresses,
            broker=self.broker,
        )
        hosts: dict[bytes, list[str]] = {}
        for name, boot in zip(names, boots, strict=True):
            self.boots[name] = boot
            if name in batched:
                hosts.setdefault(routes[name], []).append(name)
            else:
                await self.router.send_multipart([routes[name], encode(boot)])
        for route, members in hosts.items():
            answer = BootstrapBatch(tuple(members), tuple(self.boots[m] for m in members))
            await self.router.send_multipart([route, encode(answer)])
        return boots

    async def serve(self) -> None:
        """Answer re-registrations with the same bootstrap, until cancelled."""
        while True:
            route, frame = await self.router.recv_multipart()
            msg = decode(frame)
            if isinstance(msg, Beat | BeatBatch):
                continue  # a bootstrapped node's lifeline (node.lifeline): this fake is silent
            if isinstance(msg, RegisterBatch):
                names = tuple(reg.name for reg in msg.nodes)
                self.reregistered.extend(names)
                answer = BootstrapBatch(names, tuple(self.boots[name] for name in names))
                await self.router.send_multipart([route, encode(answer)])
                continue
            assert isinstance(msg, Register)
            self.reregistered.append(msg.name)
            await self.router.send_multipart([route, encode(self.boots[msg.name])])

    def close(self) -> None:
        self.router.close(0)
        self.ctx.term()


async def spawn_node(
    coordinator: str, name: str, log: Path, *args: str
) -> asyncio.subprocess.Process:
    """Start a real ``gossip node`` process; its stdout is piped, its log goes to ``log``.

    ``args`` are more options, e.g. ``--host 127.0.0.1 --value 3``.
    """
    with log.open("ab") as err:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "continuized.cli.app",
            "node",
            "--coordinator",
            coordinator,
            "--name",
            name,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
        )


async def final_report(proc: asyncio.subprocess.Process, within: float = 30.0) -> dict[str, Any]:
    """Wait for a node process to exit 0 and return the final report it printed."""
    async with asyncio.timeout(within):
        out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert isinstance(report, dict)
    assert report["final"] is True
    return report


def kill_all(procs: list[asyncio.subprocess.Process]) -> None:
    """Kill the processes still running (test clean-up)."""
    for proc in procs:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()


async def gossip_then_stop(nodes: Sequence[Node], activations: int, deadline: float) -> None:
    """Let in-process nodes gossip until they have applied ``activations`` jumps in all (as
    servers: one per jump; or ``deadline`` seconds have passed), then ask them all to stop.

    Counting activations instead of sleeping a fixed time makes what the test claims (how far
    that many activations get) independent of how loaded the machine is. A stall still shows:
    the deadline passes with too few activations, and the caller's assertions fail.
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while loop.time() < end:
        if sum(node.exchanger.counters.served for node in nodes) >= activations:
            break
        await asyncio.sleep(0.05)
    for node in nodes:
        node.request_stop()
