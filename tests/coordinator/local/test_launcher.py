"""The launcher's own behaviour, without a cluster: a start that stalls says what it waits for."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import continuized.coordinator.local.launcher as launcher
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.local.launcher import _said_if_slow, _Slot


async def test_a_stalled_start_says_what_it_waits_for_and_can_be_cancelled(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(launcher, "_SLOW_START", 0.05)
    state = ClusterState(graph="grid:2x2", expected=4)
    state.registered.update({"node-0": 0, "node-1": 1})
    never: asyncio.Future[launcher.Child] = asyncio.get_running_loop().create_future()
    slot = _Slot("host-38", 7000, ["node"], tmp_path / "host-38.log")
    waiting = asyncio.ensure_future(_said_if_slow(never, slot, 38, 64, state))
    while "host-38" not in capsys.readouterr().err:  # noqa: ASYNC110 -- stderr has no event
        await asyncio.sleep(0.02)
    # Ctrl-C or SIGTERM cancels the launch: the stalled start goes with it.
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert never.cancelled()


async def test_the_stall_message_names_the_process_and_the_registrations(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(launcher, "_SLOW_START", 0.05)
    state = ClusterState(graph="grid:2x2", expected=4)
    state.registered.update({"node-0": 0})
    slot = _Slot("host-3", 7000, ["node"], tmp_path / "host-3.log")

    async def late() -> launcher.Child:
        await asyncio.sleep(0.3)
        raise RuntimeError("no child")

    with pytest.raises(RuntimeError):
        await _said_if_slow(late(), slot, 3, 8, state)
    err = capsys.readouterr().err
    assert "host-3 (3 of 8 started) is not started yet; 1 of 4 nodes registered" in err
