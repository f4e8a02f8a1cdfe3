"""coordinator.machine.interfaces: a --bind on this machine is checked at once, and the nodes
are told an address they can connect to."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from continuized.coordinator.machine.interfaces import (
    check_zmq_bind,
    connect_address,
    this_host_address,
)
from continuized.coordinator.machine.ports import is_local_host
from continuized.gossip.errors import ConfigError

# TEST-NET-1 (RFC 5737): documentation only, the address of no machine.
NOT_HERE = "192.0.2.1"


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port some other program listens on for the whole test."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def test_this_hosts_addresses_pass() -> None:
    check_zmq_bind("--bind", "tcp://127.0.0.1:0")
    check_zmq_bind("--bind", "tcp://0.0.0.0:0")
    check_zmq_bind("--bind", "tcp://*:*")
    check_zmq_bind("--bind", "tcp://localhost:0")
    check_zmq_bind("--bind", "ipc:///tmp/anything")
    assert is_local_host("127.0.0.1")


def test_an_address_of_another_machine_is_refused_naming_it() -> None:
    assert is_local_host(NOT_HERE) is False
    with pytest.raises(ConfigError) as caught:
        check_zmq_bind("--bind", f"tcp://{NOT_HERE}:5555")
    message = str(caught.value)
    assert message.startswith(f"--bind tcp://{NOT_HERE}:5555: {NOT_HERE} is not an address")
    assert "tcp://0.0.0.0:5555" in message  # the fix


def test_a_name_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"does not resolve"):
        check_zmq_bind("--bind", "tcp://no-such-host.invalid:5555")


def test_a_malformed_bind_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"--bind '0\.0\.0\.0:5555' is not a ZeroMQ address"):
        check_zmq_bind("--bind", "0.0.0.0:5555")


def test_a_busy_port_and_the_ports_after_it_are_refused(busy_port: int) -> None:
    with pytest.raises(ConfigError, match="in use"):
        check_zmq_bind("--bind", f"tcp://127.0.0.1:{busy_port}")
    with pytest.raises(ConfigError, match="in use"):
        check_zmq_bind("--bind", f"tcp://127.0.0.1:{busy_port - 1}", count=2)


def test_the_nodes_are_never_told_a_wildcard() -> None:
    here = this_host_address()
    assert here not in ("0.0.0.0", "::", "*", "")
    assert this_host_address() is here  # computed once
    for bind in ("tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://[::]:5555"):
        endpoint = connect_address(bind)
        assert endpoint.endswith(":5555")
        assert here in endpoint
    assert connect_address("tcp://127.0.0.1:5555") == "tcp://127.0.0.1:5555"
