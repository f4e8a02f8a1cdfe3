"""A secure start waits for the handshakes of the edges between processes, and no other."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.handshakes import HANDSHAKE_SECONDS, handshake_wait, process_of
from coordinator.registry import Plan, Ready, Registry
from coordinator.security import Security
from gossip.graph.spectral import graph_quantities
from gossip.graph.topology import parse_topology
from gossip.model.algorithms import gossip_params
from gossip.wire.schema import Register


def test_a_process_is_its_address_host_and_its_pid() -> None:
    assert process_of("tcp://10.0.0.5:7000", 12) == ("10.0.0.5", 12)
    # Two containers may both run as pid 7: their addresses still tell them apart.
    assert process_of("tcp://10.0.0.5:7000", 7) != process_of("tcp://10.0.0.6:7000", 7)
    assert process_of("tcp://10.0.0.5:7000", 7) == process_of("tcp://10.0.0.5:7001", 7)


@given(
    n=st.integers(2, 40),
    owners=st.lists(st.integers(0, 5), min_size=40, max_size=40),
    cores=st.integers(1, 8),
)
def test_the_wait_counts_two_handshakes_per_edge_between_processes(
    n: int, owners: list[int], cores: int
) -> None:
    edges = parse_topology(f"cycle:{n}" if n > 2 else "line:2").edges
    processes = [("127.0.0.1", owners[i]) for i in range(n)]
    crossing = sum(owners[i] != owners[j] for i, j in edges)
    wait = handshake_wait(edges, processes, cores=cores)
    assert wait == pytest.approx(HANDSHAKE_SECONDS * 2 * crossing / cores)
    assert handshake_wait(edges, [("127.0.0.1", 1)] * n, cores=cores) == 0.0
    alone = handshake_wait(edges, [("127.0.0.1", i) for i in range(n)], cores=cores)
    assert alone == pytest.approx(HANDSHAKE_SECONDS * 2 * len(edges) / cores)


def _secure_plan(spec: str, names: list[str]) -> Plan:
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    return Plan(
        topology=topo,
        params=gossip_params("arg", q.mu_gossip, q.r_max),
        cluster="test",
        rate=100.0,
        broker="",
        metrics_period=0.1,
        values=np.zeros((topo.n, 1)),
        start_delay=2.0,
        security=Security("pub", "sec", {name: f"key-{name}" for name in names}),
    )


def test_a_secure_registry_sets_the_epoch_after_the_cross_process_handshakes() -> None:
    names = [f"node-{k}" for k in range(4)]
    registry = Registry(_secure_plan("line:4", names), "run-1")
    out = None
    for k, name in enumerate(names):  # node-0, node-1 in process 1; node-2, node-3 in 2
        register = Register(name, f"tcp://127.0.0.1:{7000 + k}", None, pid=1 + k // 2)
        out = registry.register(register, now=100.0)
    assert isinstance(out, Ready)
    one_edge = HANDSHAKE_SECONDS * 2 / (os.cpu_count() or 1)  # only (1, 2) joins two
    assert out.assignment.epoch == pytest.approx(100.0 + 2.0 + one_edge)
