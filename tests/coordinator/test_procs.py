"""Child processes and their ports (coordinator.procs)."""

from __future__ import annotations

import socket

from coordinator.procs import free_port, free_ports


def test_free_ports_are_distinct_bindable_and_avoid_the_taken_ones() -> None:
    taken = free_port()
    ports = free_ports(40, taken=[taken])
    assert len(set(ports)) == 40
    assert taken not in ports
    for port in ports[:5]:  # free right now: each binds
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))
