"""The node's lifeline (node.lifeline) against a real ROUTER standing in for the coordinator."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import zmq
import zmq.asyncio

from continuized.coordinator.machine.ports import free_port
from continuized.gossip.wire.schema import (
    MAX_FRAME,
    Beat,
    BeatBatch,
    RegisterError,
    Stop,
    decode,
    encode,
)
from continuized.node.host import _delivered
from continuized.node.lifeline import FINAL_ROOM, Lifeline, LifelineGroup

EPOCH = 1_700_000_000.0


@pytest.fixture
async def router() -> AsyncIterator[tuple[zmq.asyncio.Socket, str]]:
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    address = f"tcp://127.0.0.1:{free_port('127.0.0.1')}"
    sock.bind(address)
    try:
        yield sock, address
    finally:
        ctx.destroy(linger=0)


def _line(
    address: str, stops: list[int], final: list[dict[str, Any] | None], **kw: Any
) -> Lifeline:
    return Lifeline(
        address,
        "n0",
        EPOCH,
        lambda: stops.append(1),
        lambda: final[0],
        kw.pop("broker_lost_for", lambda: 0.0),
        **kw,
    )


async def test_a_stop_answer_stops_the_node_and_the_final_report_goes_until_taken(
    router: tuple[zmq.asyncio.Socket, str],
) -> None:
    sock, address = router
    stops: list[int] = []
    final: list[dict[str, Any] | None] = [None]
    line = _line(address, stops, final)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(line.run())
        envelope, frame = await sock.recv_multipart()
        beat = decode(frame)
        assert beat == Beat("n0", EPOCH, "")
        await sock.send_multipart([envelope, encode(Stop(EPOCH + 5.0, "another run"))])
        envelope, frame = await sock.recv_multipart()  # the next beat: ignored, not ours
        assert stops == []
        await sock.send_multipart([envelope, encode(Stop(EPOCH, "broker-lost"))])
        async with asyncio.timeout(5):
            while not stops:  # noqa: ASYNC110 -- a callback list: no event to await
                await asyncio.sleep(0.01)
        assert line.stopped_by == "coordinator"
        final[0] = {"node": 0, "final": True}
        line.kick()  # as the node does once its final report is there
        while True:  # the final report goes out at once, and again until taken
            envelope, frame = await sock.recv_multipart()
            beat = decode(frame)
            assert isinstance(beat, Beat)
            if beat.final:
                break
        assert beat.final == '{"node": 0, "final": true}'
        assert not line.delivered.is_set()
        await sock.send_multipart([envelope, encode(Beat("n0", EPOCH, Beat.TAKEN))])
        async with asyncio.timeout(5):
            await task  # delivered: the lifeline ends
    assert line.delivered.is_set()
    assert stops == [1]


def _report_of(size: int) -> dict[str, Any]:
    """A final report whose JSON is ``size`` bytes (``{"x": "aa...a"}``)."""
    report = {"x": "a" * (size - len('{"x": ""}'))}
    assert len(json.dumps(report)) == size
    return report


@pytest.mark.parametrize(
    ("size", "over_mqtt"),
    [(100, False), (FINAL_ROOM, False), (FINAL_ROOM + 1, True), (2 * FINAL_ROOM, True)],
)
def test_the_beat_says_the_final_went_over_mqtt_exactly_when_it_is_past_final_room(
    size: int, over_mqtt: bool
) -> None:
    final: list[dict[str, Any] | None] = [None]
    line = _line("tcp://127.0.0.1:1", [], final)
    assert line.beat() == Beat("n0", EPOCH, "")  # gossiping: neither report nor flag
    assert not line.stopped()
    final[0] = _report_of(size)
    beat = line.beat()
    assert beat.final_over_mqtt is over_mqtt
    assert beat.final == ("" if over_mqtt else json.dumps(final[0]))
    assert line.stopped()
    assert len(encode(beat)) < (1000 if over_mqtt else MAX_FRAME)


async def test_a_final_report_past_what_a_beat_carries_goes_over_mqtt_only_and_says_so(
    router: tuple[zmq.asyncio.Socket, str], caplog: pytest.LogCaptureFixture
) -> None:
    sock, address = router
    stops: list[int] = []
    final: list[dict[str, Any] | None] = [None]
    line = _line(address, stops, final)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(line.run())
        envelope, frame = await sock.recv_multipart()
        assert decode(frame) == Beat("n0", EPOCH, "")  # gossiping: no flag
        await sock.send_multipart([envelope, encode(Beat("n0", EPOCH, ""))])
        # A large model's final report: its parameters alone pass the frame a beat may fill.
        final[0] = {"node": 0, "final": True, "x": [0.125] * (FINAL_ROOM // 7)}
        flagged = Beat("n0", EPOCH, "", final_over_mqtt=True)
        for _ in range(2):  # at once, and again a second later: not taken yet
            envelope, frame = await sock.recv_multipart()
            assert len(frame) < 1000
            assert decode(frame) == flagged
            # The report is not there yet (still on its way over MQTT): a Stop, not "taken".
            await sock.send_multipart([envelope, encode(Stop(EPOCH, "reached"))])
        assert not line.delivered.is_set()
        envelope, frame = await sock.recv_multipart()
        assert decode(frame) == flagged
        await sock.send_multipart([envelope, encode(Beat("n0", EPOCH, Beat.TAKEN))])
        async with asyncio.timeout(5):
            await task  # the coordinator holds it: the lifeline ends
    assert line.delivered.is_set()
    assert "past the" in caplog.text
    assert caplog.text.count("over MQTT only") == 1
    # Its host process waited for that answer, as for a report that fits (before the flag it
    # did not, and the coordinator waited 3 s at every large-model run's end for beats that
    # could not tell it).
    async with asyncio.timeout(1.0):
        await _delivered([line], within=30.0)
    waiting = _line(address, stops, [final[0]])
    waiting.answered = True
    started = time.monotonic()
    await _delivered([waiting], within=0.3)
    assert time.monotonic() - started >= 0.3
    # A report that fits goes in the beats, as before, and is waited for.
    small = _line(address, stops, [{"node": 0, "final": True}])
    assert small.final_text() == '{"node": 0, "final": true}'
    assert small.beat().final_over_mqtt is False
    small.answered = True
    started = time.monotonic()
    await _delivered([small], within=0.3)
    assert time.monotonic() - started >= 0.3


async def test_an_older_coordinator_that_refuses_the_flag_gets_plain_beats_and_is_not_waited_for(
    router: tuple[zmq.asyncio.Socket, str],
) -> None:
    sock, address = router
    big = {"node": 0, "final": True, "x": [0.125] * (FINAL_ROOM // 7)}
    line = _line(address, [], [big])
    line.answered = True
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(line.run())
        envelope, frame = await sock.recv_multipart()
        assert decode(frame) == Beat("n0", EPOCH, "", final_over_mqtt=True)
        # What a coordinator that predates the field answers (coordinator.membership.registrar).
        refusal = RegisterError("bad message: beat message has unexpected field(s) ...")
        await sock.send_multipart([envelope, encode(refusal)])
        async with asyncio.timeout(1.0):
            await _delivered([line], within=30.0)  # not waited for: it cannot say "taken"
        envelope, frame = await sock.recv_multipart()  # a second later: the beat it reads
        assert decode(frame) == Beat("n0", EPOCH, "")
        task.cancel()
    assert not line.delivered.is_set()


async def test_without_broker_and_coordinator_the_node_stops_itself_after_orphan_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stops: list[int] = []
    address = f"tcp://127.0.0.1:{free_port('127.0.0.1')}"  # nobody listens
    line = _line(address, stops, [None], orphan_after=0.3, broker_lost_for=lambda: math.inf)
    async with asyncio.timeout(5):
        task = asyncio.create_task(line.run())
        while not stops:  # noqa: ASYNC110 -- a callback list: no event to await
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert line.stopped_by == "orphaned"
    assert "no broker and no coordinator for" in caplog.text  # never had one: no duration


async def test_a_connected_broker_keeps_a_node_without_coordinator() -> None:
    stops: list[int] = []
    address = f"tcp://127.0.0.1:{free_port('127.0.0.1')}"
    line = _line(address, stops, [None], orphan_after=0.2, broker_lost_for=lambda: 0.0)
    task = asyncio.create_task(line.run())
    await asyncio.sleep(0.6)  # three times orphan_after: a wait for nothing to happen
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stops == []
    assert line.coordinator_lost_for() > 0.2


async def test_a_host_processs_lifelines_beat_in_one_batch_on_one_connection(
    router: tuple[zmq.asyncio.Socket, str],
) -> None:
    """A host's nodes beat together: one BeatBatch on one socket; a Stop stops them all; each
    final report goes out once there (in a batch of the new ones) and again until taken."""
    sock, address = router
    stops: list[int] = []
    finals: dict[str, dict[str, Any] | None] = {"n0": None, "n1": None}
    lines = [
        Lifeline(
            address, name, EPOCH, lambda: stops.append(1), lambda n=name: finals[n], lambda: 0.0
        )
        for name in ("n0", "n1")
    ]
    group = LifelineGroup(lines)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(group.run())
        envelope, frame = await sock.recv_multipart()
        assert decode(frame) == BeatBatch((Beat("n0", EPOCH, ""), Beat("n1", EPOCH, "")))
        await sock.send_multipart([envelope, encode(Stop(EPOCH, "timeout"))])
        async with asyncio.timeout(5):
            while len(stops) < 2:  # noqa: ASYNC110 -- a callback list: no event to await
                await asyncio.sleep(0.01)
        assert [line.stopped_by for line in lines] == ["coordinator", "coordinator"]
        finals["n1"] = {"node": 1, "final": True}
        lines[1].kick()  # as the node does once its final report is there
        while True:  # n1's final report goes at once, alone: n0 has none yet
            envelope, frame = await sock.recv_multipart()
            batch = decode(frame)
            assert isinstance(batch, BeatBatch)
            if any(b.final for b in batch.beats):
                break
        assert batch.beats == (Beat("n1", EPOCH, '{"node": 1, "final": true}'),)
        await sock.send_multipart([envelope, encode(BeatBatch((Beat("n1", EPOCH, Beat.TAKEN),)))])
        async with asyncio.timeout(5):
            await lines[1].delivered.wait()
        assert not task.done()  # n0's report is not taken yet
        finals["n0"] = {"node": 0, "final": True}
        lines[0].kick()
        while True:  # now only n0 beats: n1's report was taken
            envelope, frame = await sock.recv_multipart()
            batch = decode(frame)
            assert isinstance(batch, BeatBatch)
            assert [b.name for b in batch.beats] == ["n0"]
            if batch.beats[0].final:
                break
        await sock.send_multipart([envelope, encode(BeatBatch((Beat("n0", EPOCH, Beat.TAKEN),)))])
        async with asyncio.timeout(5):
            await task  # every report delivered: the group ends
    assert stops == [1, 1]


async def test_a_host_processs_lifeline_says_in_its_batch_which_finals_went_over_mqtt(
    router: tuple[zmq.asyncio.Socket, str],
) -> None:
    sock, address = router
    big = {"node": 0, "final": True, "x": [0.125] * (FINAL_ROOM // 7)}
    finals: dict[str, dict[str, Any] | None] = {"n0": None, "n1": None}
    lines = [
        Lifeline(address, name, EPOCH, lambda: None, lambda n=name: finals[n], lambda: 0.0)
        for name in ("n0", "n1")
    ]
    group = LifelineGroup(lines)
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(group.run())
        envelope, frame = await sock.recv_multipart()
        assert decode(frame) == BeatBatch((Beat("n0", EPOCH, ""), Beat("n1", EPOCH, "")))
        finals["n0"] = big
        finals["n1"] = {"node": 1, "final": True}
        lines[1].kick()  # as the node does once its final report is there
        while True:  # both stopped: n0 says its report went over MQTT, n1 carries its own
            envelope, frame = await sock.recv_multipart()
            batch = decode(frame)
            assert isinstance(batch, BeatBatch)
            if len(batch.beats) == 2 and all(b.final or b.final_over_mqtt for b in batch.beats):
                break
        assert len(frame) < 1000
        assert batch.beats == (
            Beat("n0", EPOCH, "", final_over_mqtt=True),
            Beat("n1", EPOCH, '{"node": 1, "final": true}'),
        )
        echoes = BeatBatch((Beat("n0", EPOCH, Beat.TAKEN), Beat("n1", EPOCH, Beat.TAKEN)))
        await sock.send_multipart([envelope, encode(echoes)])
        async with asyncio.timeout(5):
            await task  # both taken: the group ends
    assert all(line.delivered.is_set() for line in lines)
