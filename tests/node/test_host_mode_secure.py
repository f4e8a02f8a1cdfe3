"""Host mode secured: ``gossip up --nodes-per-process 4`` under attack, real processes.

line:8 runs as two host processes of four nodes (host-0: node-0 .. node-3). Each node of a
process has its own key and its own ZAP domain, so the attack of the issue (forged ``src`` on
node 3's edge) fails three ways: an outsider with a fresh key gets no frame in; node 0's key,
admitted by node 0's neighbours but not node 3's, is refused by node 3 although node 0 lives in
the same process and shares its ZAP handler; node 2's key claiming to be node 4 is counted as
forged. The run still reaches eps with its mass exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

from continuized.cli.entries import NODE_ENTRIES
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.local.broker import RunningBroker
from continuized.coordinator.local.launcher import run_up
from continuized.coordinator.local.settings import UpConfig
from continuized.coordinator.run.service import CoordinatorConfig
from continuized.gossip.files.keys import Identity, load_identity
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.wire.schema import Request, encode

pytestmark = [pytest.mark.cluster, pytest.mark.broker, pytest.mark.timeout(240)]


async def until(check: Callable[[], bool], what: str, within: float = 90.0) -> None:
    """Wait for ``check()`` (a count in the coordinator's state), failing with ``what``."""
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 -- a count in the coordinator's state: no event
            await asyncio.sleep(0.05)
    assert check(), what


def forged(src: int, count: int) -> list[bytes]:
    """Well-formed requests on node 3's edge to ``src`` of line:8, claiming to come from it."""
    edge = dict((peer, k) for k, peer in parse_topology("line:8").incident(3))[src]
    return [
        encode(Request(src=src, edge=edge, seq=10**6 + k, ack=0, t=1.0, u=(1e3,)))
        for k in range(count)
    ]


async def refused(ctx: zmq.asyncio.Context, target: Identity, address: str, own: Identity) -> None:
    """Connect to ``target`` with ``own``'s key, send forged frames, wait for the refusal."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.curve_serverkey = target.public.encode()
    sock.curve_publickey, sock.curve_secretkey = own.public.encode(), own.secret.encode()
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    try:
        sock.connect(address)
        for frame in forged(2, 20):
            # The refused handshake may tear the connection's queue down: a frame that cannot
            # be queued is as refused as one that can (waiting to queue it could last forever).
            with contextlib.suppress(zmq.Again):
                await sock.send(frame, zmq.NOBLOCK)
        event = await asyncio.wait_for(recv_monitor_message(monitor), 30)
        assert event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH
    finally:
        sock.disable_monitor()
        monitor.close(0)
        sock.close(0)


def print_logs(log_dir: Path, started: dict[str, Any]) -> None:
    """Print what a failed run left: the coordinator's view and the processes' last lines."""
    state = started.get("state")
    if state is not None:
        print(f"coordinator: phase {state.phase}, t {state.t}, message {state.message!r}")
        for k, view in sorted(state.nodes.items()):
            print(f"  node {k}: t {view.t}, final {view.final}, counters {view.counters}")
    for path in sorted(log_dir.glob("*.log")):
        lines = path.read_text(errors="replace").splitlines()
        print(f"--- {path.name}, last lines of {len(lines)}:")
        print("\n".join(line[:400] for line in lines[-15:]))


def final_of(log: Path, node: int) -> dict[str, Any]:
    """Node ``node``'s final report among its host's JSON lines on stdout."""
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            report = json.loads(line)
            if report.get("node") == node and report.get("final"):
                return dict(report)
    raise AssertionError(f"no final report of node {node} in {log}")


async def test_host_mode_is_secure_by_default_and_forged_src_fails(tmp_path: Path) -> None:
    config = UpConfig(
        entries=NODE_ENTRIES,
        coordinator=CoordinatorConfig(
            graph="line:8", algorithm="arg", rate=50.0, values="onehot", until=1e-12
        ),
        log_dir=tmp_path,
        embedded="mosquitto",
        timeout=150.0,
        nodes_per_process=4,
    )
    started: dict[str, Any] = {}

    def on_start(state: ClusterState, broker: RunningBroker) -> None:
        started.update(state=state)

    run = asyncio.ensure_future(run_up(config, on_start))
    ctx = zmq.asyncio.Context()
    insider = ctx.socket(zmq.DEALER)
    insider.setsockopt(zmq.LINGER, 0)
    try:
        # Below the test's own timeout, so that a stuck run fails here, with its logs.
        async with asyncio.timeout(200):
            await until(lambda: "state" in started or run.done(), "the run did not start")
            state: ClusterState = started["state"]
            await until(lambda: 3 in state.nodes and state.nodes[3].address != "", "no node 3")
            address = state.nodes[3].address
            keys = tmp_path / "keys"
            node3 = load_identity(keys / "node-3")
            public, secret = zmq.curve_keypair()
            outsider = Identity("outsider", public.decode(), secret.decode(), node3.public)
            # Node 0 shares node 3's process and ZAP handler, but is not its neighbour. Node 3
            # holds each unknown key for a while (node.transport.curve) before it refuses it: both
            # at once.
            await asyncio.gather(
                refused(ctx, node3, address, outsider),
                refused(ctx, node3, address, load_identity(keys / "node-0")),
            )
            node2 = load_identity(keys / "node-2")  # a neighbour, claiming to be node 4
            insider.curve_serverkey = node3.public.encode()
            insider.curve_publickey = node2.public.encode()
            insider.curve_secretkey = node2.secret.encode()
            insider.connect(address)
            for frame in forged(4, 20):
                await insider.send(frame)
            await until(
                lambda: state.nodes[3].counters.get("forged", 0) >= 20,
                "node 3 did not count the insider's 20 forged requests",
            )
            summary = await run
    except BaseException:
        print_logs(tmp_path, started)
        raise
    finally:
        insider.close(0)
        ctx.term()
        if not run.done():
            run.cancel()
            await asyncio.wait([run], timeout=30)  # its processes stopped, or given up on
    assert summary.stop_reason == "reached"
    assert summary.mass_drift_rel is not None
    assert summary.mass_drift_rel < 1e-9
    # Each node was named after its own key, host-0 holding node-0 .. node-3.
    assert sorted(state.nodes[k].name for k in range(8)) == sorted(f"node-{k}" for k in range(8))
    final = final_of(tmp_path / "host-0.log", 3)
    assert final["counters"]["forged"] == 20
    assert final["counters"]["rejected"] == 0  # neither refused key got a frame in
