"""Faults at the network level: real nodes in their own network namespaces, real packet loss.

Every ``gossip node`` runs in a namespace of its own behind a veth on one switch
(:mod:`_netns`); mosquitto and the coordinator run in the test's namespace on the switch's
hub address. The run is secure, as ``gossip up`` is by default (CurveZMQ keys, MQTT passwords
and ACL). Faults, all with iptables in the nodes' namespaces:

* random drop: every packet of every node (to its neighbours, the broker and the coordinator)
  is dropped with probability ``DROP`` on the way out and again on the way in, from the first
  report of every node to the end of the run (TCP retransmits; the exchanges time out and are
  retried);
* a partition: every packet between the graph's two halves is dropped while the halves make
  ``INSIDE`` activations (a few seconds), then the rules are removed (the partition heals).

Checked: the partition held (packets dropped, the cut edges stalled while the halves went on,
retries rose at the cut) and healed (the cut edges exchange again); the run reached eps with
every final report in, the sum exact to 1e-9 and the final error to the *true* initial mean
(not a half's) at most about eps. The partition leaves the hub alone (registration, MQTT), so
the coordinator sees every report while the nodes are cut from each other.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import zmq
from _netns import NetLab, netns_unavailable

from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.local.broker import MosquittoAuth, find_mosquitto, mosquitto_broker
from continuized.coordinator.machine.children import Child, spawn, stop_all
from continuized.coordinator.machine.ports import free_port
from continuized.coordinator.membership.security import load_security
from continuized.coordinator.mqtt.auth import write_mosquitto_auth
from continuized.coordinator.run.service import Coordinator, CoordinatorConfig, prepare
from continuized.gossip.files.keys import COORDINATOR, init_keys
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.values import initial_values

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.broker,
    pytest.mark.netns,
    pytest.mark.slow,
    pytest.mark.timeout(240),
]

GRAPH = "grid:4x2"  # 8 nodes; ids 0-3 (rows 0-1) and 4-7 (rows 2-3) are the halves
RATE = 80.0  # activations per second, network-wide
EPS = 1e-9
DROP = 0.05  # per packet, at each end: about 10% of the packets between two nodes are lost
INSIDE = 300  # activations (counted at both ends) inside the halves while they are cut
GIVE_UP = 150.0  # seconds: only a safety net, every wait below is on an event or a count


def require_mosquitto() -> str:
    """The mosquitto binary (skip without it, except under CI where it must exist)."""
    binary = find_mosquitto()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mosquitto is not installed (scripts/system-deps installs it)")
        pytest.skip("mosquitto is not installed")
    return binary


def require_netns() -> None:
    """Skip without root, ``ip netns``, veth or iptables, except under CI (root) where they must
    work."""
    reason = netns_unavailable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"network namespaces are needed in CI: {reason}")
        pytest.skip(reason)


@pytest.fixture
def lab() -> Iterator[NetLab]:
    """One namespace per node of ``GRAPH``, removed afterwards whatever happened."""
    require_netns()
    net = NetLab(parse_topology(GRAPH).n).open()
    try:
        yield net
    finally:
        net.close()


async def until(check: Callable[[], bool], what: str, run: asyncio.Task[object]) -> None:
    """Wait for ``check()`` (a count in the coordinator's state); fail early if the run ended."""
    while not check():  # counts in the coordinator's state: there is no event to await
        if run.done():
            run.result()  # its error, if any
            pytest.fail(f"the run ended before {what}")
        await asyncio.sleep(0.05)


def edge_ends(state: ClusterState, edges: list[tuple[int, int]]) -> int:
    """Activations applied so far on ``edges``, counted at both ends (latest reports)."""
    total = 0
    for u, v in edges:
        for me, peer in ((u, v), (v, u)):
            view = state.nodes.get(me)
            total += view.edges.get(peer, 0) if view is not None else 0
    return total


def retried(state: ClusterState, nodes: set[int]) -> int:
    """Requests re-sent after a timeout by ``nodes``, so far."""
    return sum(state.nodes[v].counters.get("retried", 0) for v in nodes if v in state.nodes)


_LISTEN = "import socket, sys; s = socket.create_server((sys.argv[1], 7000)); print(flush=True)\n"
_LISTEN += "while True: s.accept()[0].close()"
_CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], 7000), timeout=1).close()"


def _cut_heal_then_fail(made: list[str]) -> None:
    """A lab of two: TCP connects, not across a partition, again once healed; then an error."""
    with NetLab(2) as net:
        made += [net.switch, net.ns(0), net.ns(1), f"{net.prefix}h"]
        server = subprocess.Popen(
            net.exec_argv(1, [sys.executable, "-c", _LISTEN, net.ip(1)]), stdout=subprocess.PIPE
        )
        try:
            assert server.stdout is not None
            server.stdout.readline()  # listening

            def connects() -> bool:
                argv = net.exec_argv(0, [sys.executable, "-c", _CONNECT, net.ip(1)])
                return subprocess.run(argv, capture_output=True, check=False).returncode == 0

            assert connects()
            net.partition([0], [1])
            assert not connects()
            assert net.dropped("PARTITION") > 0
            net.heal()
            assert connects()
        finally:
            server.kill()
            server.wait()
        raise RuntimeError("on purpose: the lab must be removed on an error")


def test_the_lab_cuts_heals_and_leaves_nothing_behind() -> None:
    require_netns()
    made: list[str] = []
    with pytest.raises(RuntimeError, match="on purpose"):
        _cut_heal_then_fail(made)
    assert len(made) == 4
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    names = {line.split()[0].split("@")[0] for line in (listed + links).splitlines() if line}
    assert not names & set(made)


async def test_random_drop_and_a_partition_that_heals(lab: NetLab, tmp_path: Path) -> None:
    topo = parse_topology(GRAPH)
    n = topo.n
    side_a = set(range(n // 2))
    pairs = [(int(u), int(v)) for u, v in topo.edges]
    cut = [(u, v) for u, v in pairs if (u in side_a) != (v in side_a)]
    inside = [(u, v) for u, v in pairs if (u in side_a) == (v in side_a)]
    assert cut, "the halves must share edges for the partition to mean anything"

    keys = tmp_path / "keys"
    names = [f"node-{k}" for k in range(n)]
    init_keys(keys, names, zmq.curve_keypair, force=True)
    security = load_security(keys / COORDINATOR)
    passwd, acl = write_mosquitto_auth(keys / "mqtt", security.mqtt_secret, n)
    procs: list[Child] = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    async with mosquitto_broker(
        require_mosquitto(), host=lab.hub, auth=MosquittoAuth(passwd, acl)
    ) as broker:
        bind = f"tcp://{lab.hub}:{free_port(lab.hub)}"
        config = CoordinatorConfig(
            graph=GRAPH,
            algorithm="arg",
            rate=RATE,
            values="onehot",
            until=EPS,
            cluster=lab.prefix,
            metrics_period=0.1,
            broker=broker.url,
            bind=bind,
            keys=keys / COORDINATOR,
            resume=False,
            run_timeout=GIVE_UP,
            json_path=tmp_path / "run.json",
        )
        state, plan = prepare(config)
        coordinator = Coordinator(config, state, plan, broker_kind=broker.kind)
        run = asyncio.create_task(coordinator.run())
        try:
            async with asyncio.timeout(GIVE_UP):
                await until(coordinator.bound.is_set, "the coordinator bound its socket", run)
                for k, name in enumerate(names):
                    argv = [sys.executable, "-m", "continuized.cli.app", "node",
                            "--coordinator", bind, "--name", name, "--host", lab.ip(k),
                            "--keys", str(keys / name),
                            "--seed", str(k)]  # fmt: skip
                    procs.append(
                        await spawn(lab.exec_argv(k, argv), log=tmp_path / f"{name}.log", env=env)
                    )
                # The drop starts once every node has reported: a SYN or an MQTT packet lost at
                # start-up costs a second or more of TCP back-off, while the others gossip on
                # and ARG reaches the error floor the partition must show (t = 165 here).
                await until(lambda: len(state.nodes) == n, "every node reported", run)
                for k in range(n):  # random drop of every packet of every node, from now on
                    lab.drop_randomly(k, DROP)
                await until(
                    lambda: edge_ends(state, cut) >= 2 * len(cut), "the cut edges exchanged", run
                )
                # Node ids are the coordinator's; namespace k holds the node named node-k.
                where = {state.registered[name]: k for k, name in enumerate(names)}
                lab.partition(
                    (where[v] for v in side_a), (where[v] for v in range(n) if v not in side_a)
                )
                cut_at = time.time()
                await until(
                    lambda: all(state.nodes[v].wall > cut_at for v in range(n)),
                    "a report from every node after the cut",
                    run,
                )
                cut_a, inside_a = edge_ends(state, cut), edge_ends(state, inside)
                at_cut = {v for edge in cut for v in edge}
                retried_a = retried(state, at_cut)
                await until(
                    lambda: (
                        edge_ends(state, inside) >= inside_a + INSIDE
                        and retried(state, at_cut) > retried_a
                    ),
                    "the halves went on and the cut retried",
                    run,
                )
                cut_b, inside_b = edge_ends(state, cut), edge_ends(state, inside)
                partition_dropped = lab.dropped("PARTITION")
                error_cut = state.history[-1].error
                lab.heal()
                healed_at = time.time()
                await until(
                    lambda: edge_ends(state, cut) > cut_b + 2 * len(cut),
                    "exchanges across the healed cut",
                    run,
                )
                summary = await run
                done_at = time.time()
                codes = [await proc.wait() for proc in procs]  # each exits on the stop
        finally:
            await stop_all(procs)
            if not run.done():
                run.cancel()
            # A failure above is what the test reports, not the cancelled run's.
            await asyncio.gather(run, return_exceptions=True)
    random_dropped = lab.dropped("RANDOMDROP")
    counters = [view.counters for view in state.nodes.values()]
    print(  # the figures of this run, for the report (pytest -s)
        f"partition {healed_at - cut_at:.2f} s: {partition_dropped} packets dropped, cut edges "
        f"{cut_b - cut_a} / inside {inside_b - inside_a} activations (both ends); random drop "
        f"{random_dropped} packets; retried {sum(c.get('retried', 0) for c in counters)}, "
        f"released {sum(c.get('released', 0) for c in counters)}; eps {done_at - healed_at:.2f} s "
        f"after the heal; drift {summary.mass_drift_rel if summary else None}, final error "
        f"{summary.final_error if summary else None}"
    )

    # The partition had an effect: packets dropped, the cut stalled while the halves went on,
    # and the error could not fall below the halves' disagreement meanwhile.
    assert partition_dropped > 0
    assert inside_b - inside_a >= INSIDE
    # At most one exchange in flight per edge end when the rules went in can still land.
    assert cut_b - cut_a <= 2 * len(cut), (cut_a, cut_b)
    assert error_cut > 1e3 * EPS
    # Random drop had an effect too, and the protocol retried through it.
    assert random_dropped > 0
    assert sum(view.counters.get("retried", 0) for view in state.nodes.values()) > 0

    # After healing, the invariants hold: every final report in, the sum exact, the run at eps
    # of the TRUE mean of the initial values.
    assert summary is not None
    assert summary.reached, state.message
    assert state.final is not None
    assert state.final.complete, "every node must send its final state"
    assert summary.mass_drift_rel is not None
    assert summary.mass_drift_rel <= 1e-9
    # The truth, independent of the coordinator: onehot puts 1 on node 0, so the sum is 1 and
    # the mean 1/n (each half's mean, 1/4 and 0, is what a partition that never healed gives).
    initial = np.array(state.initial, dtype=float).reshape(n, -1)
    np.testing.assert_array_equal(initial, initial_values("onehot", n).reshape(n, -1))
    final = np.array(state.final.values, dtype=float).reshape(n, -1)
    assert abs(final.sum() - 1.0) <= 1e-9
    error = 0.5 * float(((final - 1.0 / n) ** 2).sum())
    # The stop comes one report period after eps; ARG's error is not monotone: a small margin.
    assert error <= 3 * EPS, error
    assert summary.final_error is not None
    assert summary.final_error <= 3 * EPS
    assert codes == [0] * n
