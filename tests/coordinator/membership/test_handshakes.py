"""A secure start waits for the handshakes of the edges between processes, and no other
(the registry's epoch: tests/coordinator/test_registry.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.coordinator.membership.handshakes import (
    HANDSHAKE_SECONDS,
    handshake_wait,
    process_of,
)
from continuized.gossip.graph.topology import parse_topology


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
