"""gossip.wire.endpoints: a --bind is read or refused naming the value, and the address to
connect to a wildcard bind is never the wildcard."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.endpoints import (
    HOST_PLACEHOLDER,
    WILDCARD_HOSTS,
    BindAddress,
    connect_endpoint,
    parse_bind,
)


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("tcp://0.0.0.0:5555", BindAddress("tcp", "0.0.0.0", 5555)),
        ("tcp://*:0", BindAddress("tcp", "*", 0)),
        ("tcp://127.0.0.1:*", BindAddress("tcp", "127.0.0.1", None)),
        ("tcp://[::1]:65535", BindAddress("tcp", "::1", 65535)),
        ("tcp://[::]:5555", BindAddress("tcp", "::", 5555)),
        ("tcp://coordinator.lan:5555", BindAddress("tcp", "coordinator.lan", 5555)),
        ("tcp://eth0:5555", BindAddress("tcp", "eth0", 5555)),
        ("ipc:///tmp/x", BindAddress("ipc", "/tmp/x", None)),
    ],
)
def test_good_bind_addresses_are_read(endpoint: str, expected: BindAddress) -> None:
    assert parse_bind("--bind", endpoint) == expected


@pytest.mark.parametrize(
    ("endpoint", "said"),
    [
        ("0.0.0.0:5555", "not a ZeroMQ address"),
        ("http://0.0.0.0:5555", "not a ZeroMQ address"),
        ("tcp://0.0.0.0", "no host or no port"),
        ("tcp://:5555", "no host or no port"),
        ("tcp://0.0.0.0:99999", "0..65535"),
        ("tcp://0.0.0.0:port", "0..65535"),
        ("tcp://::1:5555", "in brackets"),
        ("tcp://[nope]:5555", "not an IPv6 address"),
        ("tcp://bad host:5555", "not a host name"),
        ("ipc://", "names no ipc endpoint"),
    ],
)
def test_malformed_bind_addresses_are_named_with_the_fix(endpoint: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_bind("--bind", endpoint)
    message = str(caught.value)
    assert message.startswith(f"--bind {endpoint!r}")
    assert said in message


@given(
    host=st.sampled_from(sorted(WILDCARD_HOSTS - {""})),
    port=st.integers(0, 65535),
    here=st.sampled_from(["10.0.0.7", "fe80::1", "coordinator.lan", HOST_PLACEHOLDER]),
)
def test_a_wildcard_bind_is_never_the_address_to_connect_to(
    host: str, port: int, here: str
) -> None:
    shown = f"[{host}]" if ":" in host else host
    endpoint = connect_endpoint(parse_bind("--bind", f"tcp://{shown}:{port}"), here)
    assert endpoint.endswith(f":{port}")
    assert here in endpoint
    assert "0.0.0.0" not in endpoint
    assert "*" not in endpoint


def test_a_specific_host_and_an_ipc_path_are_kept() -> None:
    assert connect_endpoint(parse_bind("--bind", "tcp://[::1]:5"), "h") == "tcp://[::1]:5"
    assert connect_endpoint(parse_bind("--bind", "tcp://10.1.2.3:*"), "h") == "tcp://10.1.2.3:PORT"
    assert connect_endpoint(parse_bind("--bind", "ipc:///tmp/x"), "h") == "ipc:///tmp/x"
