"""Ports on this machine: free blocks below the ephemeral range, and where that range is read."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from continuized.coordinator.machine import ports
from continuized.coordinator.machine.ports import (
    ephemeral_ports,
    free_port,
    free_port_block,
    free_ports,
)


def test_free_ports_are_distinct_bindable_and_avoid_the_taken_ones() -> None:
    taken = free_port()
    ports = free_ports(40, taken=[taken])
    assert len(set(ports)) == 40
    assert taken not in ports
    for port in ports[:5]:  # free right now: each binds
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_block_is_free_and_bindable() -> None:
    base = free_port_block("127.0.0.1", 4)
    socks = []
    try:
        for i in range(4):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind(("127.0.0.1", base + i))
    finally:
        for sock in socks:
            sock.close()


def test_a_port_block_lies_below_the_ephemeral_range() -> None:
    # An outgoing connection's source port can never be one a node binds (again, after a
    # restart): 1,024 nodes in host mode open thousands of them.
    low, high = ephemeral_ports()
    assert 1024 <= low <= high <= 65535
    for _ in range(20):
        base = free_port_block("127.0.0.1", 64)
        assert base >= 10_000
        assert base + 63 < low


def test_without_room_below_the_ephemeral_range_the_os_picks_the_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_low, real_high = ephemeral_ports()
    monkeypatch.setattr(ports, "ephemeral_ports", lambda: (10_050, 65535))
    base = free_port_block("127.0.0.1", 64)
    assert real_low <= base <= real_high  # the OS's own choice (bind to port 0)
    for i in range(64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", base + i))


def test_the_ephemeral_range_is_read_from_linux_or_defaults_to_iana(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    narrow = tmp_path / "ip_local_port_range"
    narrow.write_text("40000\t50000\n")
    monkeypatch.setattr(ports, "_LINUX_RANGE", str(narrow))
    assert ephemeral_ports() == (40000, 50000)
    monkeypatch.setattr(ports, "_LINUX_RANGE", str(tmp_path / "absent"))
    assert ephemeral_ports() == (49152, 65535)
