"""The emulated LAN and the skewed clock of ``--fault``: parsing, latency, order, offsets."""

from __future__ import annotations

import asyncio
import time

import pytest

from continuized.gossip.errors import ConfigError
from continuized.node import FakeNetwork, FaultSpec, FaultyTransport, parse_faults

FRAMES = 300


def test_lan_and_clock_keys_parse() -> None:
    spec = parse_faults("latency_ms=1,jitter_ms=0.2,drop=0.001,skew_ms=5,offset_ms=-40")
    assert (spec.latency_ms, spec.jitter_ms, spec.drop) == (1.0, 0.2, 0.001)
    assert (spec.skew_ms, spec.offset_ms) == (5.0, -40.0)
    assert spec.active
    assert not parse_faults("skew_ms=5").active  # a clock offset alone needs no wrapper
    for bad in ("latency_ms=-1", "jitter_ms=inf", "skew_ms=-2", "offset_ms=nan"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            parse_faults(bad)


def test_clock_offsets_are_seeded_and_bounded() -> None:
    spec = FaultSpec(skew_ms=50)
    offsets = [spec.clock_offset(seed) for seed in range(200)]
    assert offsets == [spec.clock_offset(seed) for seed in range(200)]  # same seed, same clock
    assert all(abs(o) <= 0.050 for o in offsets)
    assert min(offsets) < -0.040  # the whole range is used
    assert max(offsets) > 0.040
    assert FaultSpec(offset_ms=40, skew_ms=0).clock_offset(3) == pytest.approx(0.040)


async def test_latency_holds_every_frame_and_keeps_order() -> None:
    """Every frame arrives no sooner than the latency less the jitter, and in the order sent,
    although the jitter (as large as the latency) would reorder independent delays."""
    net = FakeNetwork()
    sender = FaultyTransport(
        net.endpoint("mem://a"), FaultSpec(latency_ms=2.0, jitter_ms=2.0), seed=3
    )
    receiver = net.endpoint("mem://b")
    await sender.connect({1: "mem://b"})
    sent_at: list[float] = []
    for i in range(FRAMES):
        sent_at.append(time.perf_counter())
        sender.send(1, i.to_bytes(4, "big"))
        if i % 50 == 0:
            await asyncio.sleep(0.001)  # some frames sent later than others
    got: list[int] = []
    delays: list[float] = []
    async with asyncio.timeout(10):
        while len(got) < FRAMES:
            frame = await receiver.recv()
            i = int.from_bytes(frame.data, "big")
            got.append(i)
            delays.append(time.perf_counter() - sent_at[i])
    assert got == list(range(FRAMES))
    assert min(delays) >= 0.0  # held (a frame due at 0 ms may go at once)
    assert sorted(delays)[FRAMES // 2] >= 0.0015  # the median frame waited about the latency
    await sender.aclose()
