"""The lifelines' end of a run: every node whose final report the coordinator holds hears so.

A node's final report usually comes over MQTT first; its lifeline's final beat comes a moment
later (a report too large for a beat: a beat that says it went over MQTT only). Before its
registration socket closes, the coordinator answers it (``TAKEN``), so that no node process
waits for an answer that cannot come.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from continuized.coordinator.figures.records import NodeView
from continuized.coordinator.run.config import CoordinatorConfig
from continuized.coordinator.run.service import Coordinator
from continuized.gossip.wire.schema import Beat, RegisterError, Stop


def _coordinator(tmp_path: Path) -> Coordinator:
    config = CoordinatorConfig(graph="line:3", algorithm="rg", bind="tcp://127.0.0.1:0")
    coord = Coordinator(config)
    coord.state.epoch = 1000.0
    for k, name in enumerate(("a", "b", "c")):
        coord.state.registered[name] = k
        coord.state.nodes[k] = NodeView(node=k, name=name)
    return coord


def test_a_node_whose_final_came_over_mqtt_is_untold_until_its_final_beat() -> None:
    coord = _coordinator(Path())
    members = coord.members
    for name in ("a", "b", "c"):
        assert members.on_beat(Beat(name, 1000.0, "")) == Beat(name, 1000.0, "")
    assert members.untold() == []  # nobody stopped yet
    coord.state.nodes[0].final = True  # a's final report came over MQTT
    coord.state.nodes[1].final = True
    assert sorted(members.untold()) == ["a", "b"]
    assert members.on_beat(Beat("a", 1000.0, '{"final": true}')) == Beat("a", 1000.0, Beat.TAKEN)
    assert members.untold() == ["b"]
    # Another run's beat is not ours: neither answered nor counted.
    assert members.on_beat(Beat("c", 999.0, "")) is None
    coord.state.phase = "stopping"
    assert isinstance(members.on_beat(Beat("c", 1000.0, "")), Stop)  # c has not stopped yet
    assert members.untold() == ["b"]  # c, with no final report, is not waited for


async def test_tell_finals_returns_once_told_and_gives_up_after_its_bound() -> None:
    coord = _coordinator(Path())
    members = coord.members
    members.on_beat(Beat("a", 1000.0, ""))
    coord.state.nodes[0].final = True

    async def final_beat_later() -> None:
        await asyncio.sleep(0.2)
        members.on_beat(Beat("a", 1000.0, '{"final": true}'))

    start = time.monotonic()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(final_beat_later())
        await members.tell_finals(30.0)
    assert members.untold() == []
    assert time.monotonic() - start < 20  # it returned on the answer, not on its bound

    members.on_beat(Beat("b", 1000.0, ""))
    coord.state.nodes[1].final = True  # b's lifeline never beats again
    start = time.monotonic()
    await members.tell_finals(0.3)
    assert members.untold() == ["b"]
    assert time.monotonic() - start >= 0.3


def test_a_beat_that_says_the_final_went_over_mqtt_is_told_once_the_report_is_here() -> None:
    # A large model's final report goes over MQTT only: the node's beats then carry no report
    # but say so, and such a beat (sent after the stop) is the one answered "taken".
    coord = _coordinator(Path())
    members = coord.members
    plain = Beat("a", 1000.0, "")
    flagged = Beat("a", 1000.0, "", final_over_mqtt=True)
    assert members.on_beat(plain) == plain  # a gossiping node
    coord.state.phase = "stopping"
    # The node stopped and beats the flag before its report came over MQTT: not told yet,
    # answered as any beat, and not waited for (the coordinator holds no report of it).
    assert isinstance(members.on_beat(flagged), Stop)
    assert members.untold() == []
    coord.state.nodes[0].final = True  # the report came over MQTT
    assert members.untold() == ["a"]
    # A plain beat, even now, is not told: it may have left the node before its stop.
    assert isinstance(members.on_beat(plain), Stop)
    assert members.untold() == ["a"]
    # The node's next flagged beat is.
    assert members.on_beat(flagged) == Beat("a", 1000.0, Beat.TAKEN)
    assert members.untold() == []
    # The flag of a node that is not in the run is refused, as its final report would be.
    refusal = members.on_beat(Beat("z", 1000.0, "", final_over_mqtt=True))
    assert isinstance(refusal, RegisterError)
    assert "no node 'z'" in refusal.reason


async def test_tell_finals_ends_on_the_flagged_beat_of_a_node_whose_final_came_over_mqtt() -> None:
    coord = _coordinator(Path())
    members = coord.members
    members.on_beat(Beat("b", 1000.0, ""))
    coord.state.phase = "stopping"
    coord.state.nodes[1].final = True  # b's report came over MQTT; its beats carry none

    async def flagged_beat_later() -> None:
        await asyncio.sleep(0.2)
        members.on_beat(Beat("b", 1000.0, "", final_over_mqtt=True))

    start = time.monotonic()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(flagged_beat_later())
        await members.tell_finals(30.0)
    assert members.untold() == []
    assert time.monotonic() - start < 20  # it returned on the flagged beat, not on its bound
