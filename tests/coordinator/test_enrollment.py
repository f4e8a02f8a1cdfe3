"""The lifelines' end of a run: every node whose final report the coordinator holds hears so.

A node's final report usually comes over MQTT first; its lifeline's final beat comes a moment
later. Before its registration socket closes, the coordinator answers it (``TAKEN``), so that
no node process waits for an answer that cannot come.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from coordinator.config import CoordinatorConfig
from coordinator.records import NodeView
from coordinator.service import Coordinator
from gossip.wire.schema import Beat, Stop


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
