"""A LAN, emulated, with clocks that disagree: real nodes, one per network namespace ("host").

Every ``gossip node`` runs in a namespace of its own (:mod:`_netns`) with
``--fault latency_ms=1,jitter_ms=0.2,drop=0.001,offset_ms=O``: each frame it sends is held
about 1 ms (order kept), 0.1% are lost, and its wall clock is off by ``O``, drawn per host
(seeded) in +-50 ms, as a Pi that has not synchronised yet. mosquitto and the coordinator
run in the test's namespace on the switch's hub address; the run is secure.

Checked: the run reaches eps with every final report in and the sum exact (skew moves ticks,
never mass); the bounds on their neighbours' offsets that the nodes report (from their own
exchanges' round trips) hold the set offsets' differences, and so the coordinator's skew
figure matches the largest across an edge; and, the skew being within what the shared t
tolerates at this rate, it does not warn (tests/coordinator/test_lan_warnings.py has skew past
it, and the warning).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zmq
from _netns import NetLab
from test_netns_faults import require_mosquitto, require_netns, until

from continuized.coordinator.figures.lanrule import skew_tolerance
from continuized.coordinator.local.broker import MosquittoAuth, mosquitto_broker
from continuized.coordinator.machine.children import Child, spawn, stop_all
from continuized.coordinator.machine.ports import free_port
from continuized.coordinator.membership.security import load_security
from continuized.coordinator.mqtt.auth import write_mosquitto_auth
from continuized.coordinator.run.service import Coordinator, CoordinatorConfig, prepare
from continuized.gossip.files.keys import COORDINATOR, init_keys
from continuized.gossip.graph.topology import parse_topology

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.broker,
    pytest.mark.netns,
    pytest.mark.slow,
    pytest.mark.timeout(240),
]

GRAPH = "cycle:6"
RATE = 60.0  # activations per second: a node activates every 50 ms on average
EPS = 1e-6
SKEW_MS = 50.0  # each host's clock is off by up to this, either way
GIVE_UP = 150.0  # seconds: a safety net only
MATCH_MS = 10.0  # measured against set offsets: within half a round trip (about 1 ms)


@pytest.fixture
def lab() -> Iterator[NetLab]:
    """One namespace per node of ``GRAPH``, removed afterwards whatever happened."""
    require_netns()
    net = NetLab(parse_topology(GRAPH).n).open()
    try:
        yield net
    finally:
        net.close()


async def test_a_skewed_lan_ends_exact_and_the_skew_is_seen(lab: NetLab, tmp_path: Path) -> None:
    n = parse_topology(GRAPH).n
    offsets_ms = np.random.default_rng(7).uniform(-SKEW_MS, SKEW_MS, size=n)
    # A Pi that has not synchronised yet: within what the shared t tolerates at this rate.
    assert np.ptp(offsets_ms) * 1e-3 < skew_tolerance(n, RATE)

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
            start_delay=2.0,  # > the largest offset: no node starts as if it were late
        )
        state, plan = prepare(config)
        coordinator = Coordinator(config, state, plan, broker_kind=broker.kind)
        run = asyncio.create_task(coordinator.run())
        try:
            async with asyncio.timeout(GIVE_UP):
                await until(coordinator.bound.is_set, "the coordinator bound its socket", run)
                for k, name in enumerate(names):
                    fault = f"latency_ms=1,jitter_ms=0.2,drop=0.001,offset_ms={offsets_ms[k]:.3f}"
                    argv = [sys.executable, "-m", "continuized.cli.app", "node",
                            "--coordinator", bind, "--name", name, "--host", lab.ip(k),
                            "--keys", str(keys / name),
                            "--seed", str(k), "--fault", fault]  # fmt: skip
                    procs.append(
                        await spawn(lab.exec_argv(k, argv), log=tmp_path / f"{name}.log", env=env)
                    )
                summary = await run
                codes = [await proc.wait() for proc in procs]
        finally:
            await stop_all(procs)
            if not run.done():
                run.cancel()
            await asyncio.gather(run, return_exceptions=True)

    # The sums stay exact under the skew, and the run reached eps on the true mean.
    assert summary is not None
    assert summary.reached, state.message
    assert state.final is not None
    assert state.final.complete
    assert summary.mass_drift_rel is not None
    assert summary.mass_drift_rel <= 1e-9
    final = np.array(state.final.values, dtype=float).reshape(n, -1)
    assert abs(final.sum() - 1.0) <= 1e-9  # onehot: the sum is 1
    assert codes == [0] * n

    # Each node's bound on a neighbour's offset (its clock less the node's), against the
    # offsets set (node ids are the coordinator's; namespace k holds node-k): the bound holds
    # the truth, and its midpoint is within MATCH_MS of it.
    where = {state.registered[name]: k for k, name in enumerate(names)}
    for v, k in where.items():
        clock = state.nodes[v].clock
        assert clock is not None, v
        truth = offsets_ms[where[clock.peer]] - offsets_ms[k]
        print(f"node {v}: neighbour {clock.peer} at {clock.offset * 1e3:+.1f} "
              f"+- {clock.error * 1e3:.1f} ms, set {truth:+.1f} ms")  # fmt: skip
        assert abs(clock.offset * 1e3 - truth) <= min(MATCH_MS, clock.error * 1e3 + 0.1)
    # The largest offset across an edge: each node reports its farthest neighbour.
    across = max(
        abs(offsets_ms[where[a]] - offsets_ms[where[b]]) for a, b in parse_topology(GRAPH).edges
    )
    skew = coordinator.lan.skew()
    assert skew is not None
    assert abs(skew * 1e3 - across) <= MATCH_MS
    assert not any("the clock of node" in w for w in coordinator.lan.given), coordinator.lan.given
