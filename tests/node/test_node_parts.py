"""The node's small parts: fault specs, the Poisson clock, fault injection, addresses, config."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from continuized.gossip.errors import ConfigError
from continuized.gossip.exchange.vocabulary import Link
from continuized.node import (
    FakeNetwork,
    FaultSpec,
    FaultyTransport,
    NodeConfig,
    parse_faults,
    parse_value,
)
from continuized.node.clock import PoissonClock
from continuized.node.transport.addresses import advertised_address


def test_fault_specs_parse_and_refuse_nonsense() -> None:
    assert parse_faults("") == FaultSpec()
    assert not parse_faults("").active
    spec = parse_faults("drop=0.1, dup=0.2,delay=0.3,delay_ms=5")
    assert spec == FaultSpec(drop=0.1, dup=0.2, delay=0.3, delay_ms=5.0)
    with pytest.raises(ConfigError, match=r"bad fault 'lose=0.1'.*keys drop, dup, delay"):
        parse_faults("lose=0.1")
    with pytest.raises(ConfigError, match=r"probability in \[0, 1\), got '1.5'"):
        parse_faults("drop=1.5")
    with pytest.raises(ConfigError, match="must be a number, got 'x'"):
        parse_faults("dup=x")


def test_values_parse() -> None:
    assert parse_value("21.5") == (21.5,)
    assert parse_value("1,2,3") == (1.0, 2.0, 3.0)
    with pytest.raises(ConfigError, match="--value must be a number"):
        parse_value("1,,2")
    with pytest.raises(ConfigError, match="--value must be finite"):
        parse_value("inf")


def test_config_is_checked() -> None:
    with pytest.raises(ConfigError, match="--coordinator must be a zmq address"):
        NodeConfig(coordinator="localhost:5555")
    with pytest.raises(ConfigError, match="max_timeout"):
        NodeConfig(coordinator="tcp://h:1", timeout=3.0, max_timeout=1.0)
    assert NodeConfig(coordinator="tcp://h:1").name  # HOSTNAME-PID by default


def test_poisson_clock_rate_and_edge_shares() -> None:
    links = [Link(3, 1, 0.1), Link(7, 2, 0.3)]
    clock = PoissonClock(links, np.random.default_rng(5))
    assert clock.rate == pytest.approx(0.2)  # half of each edge's P_e: the other end has the rest
    t, picks = 0.0, []
    for _ in range(20_000):
        t, edge = clock.next_after(t)
        picks.append(edge)
    assert t / 20_000 == pytest.approx(1 / 0.2, rel=0.03)  # mean gap 1 / rate, in t
    assert picks.count(7) / len(picks) == pytest.approx(0.75, abs=0.02)
    with pytest.raises(ConfigError, match="at least one edge"):
        PoissonClock([], np.random.default_rng(0))


def test_advertised_address() -> None:
    assert advertised_address("tcp://0.0.0.0:5000", "node-3") == "tcp://node-3:5000"
    assert advertised_address("tcp://0.0.0.0:5000", None, "tcp://127.0.0.1:5555") == (
        "tcp://127.0.0.1:5000"
    )
    assert advertised_address("tcp://10.1.2.3:7", None) == "tcp://10.1.2.3:7"


async def test_faulty_transport_drops_duplicates_and_delays() -> None:
    net = FakeNetwork()
    sender = FaultyTransport(
        net.endpoint("mem://a"), FaultSpec(drop=0.2, dup=0.2, delay=0.2, delay_ms=1.0), seed=1
    )
    receiver = net.endpoint("mem://b")
    await sender.connect({1: "mem://b"})
    for i in range(2000):
        sender.send(1, i.to_bytes(2, "big"))
    await asyncio.sleep(0.05)  # the delayed ones arrive
    got = []
    while not receiver.inbox.empty():
        got.append(int.from_bytes((await receiver.recv()).data, "big"))
    stats = sender.stats
    assert 300 < stats.dropped < 500
    assert 250 < stats.duplicated < 400
    assert stats.delayed > 250
    assert len(got) == 2000 - stats.dropped + stats.duplicated
    assert got != sorted(got)  # delays reorder
    await sender.aclose()
    await receiver.aclose()
