"""The restart policy's book-keeping and the run record it adds to ``--json``."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.coordinator.figures.records import RunSummary
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.local.supervise import Supervision, moved_command, run_record
from continuized.coordinator.machine.ports import free_port_block
from continuized.gossip.errors import ConfigError


@given(limit=st.integers(0, 5), crashes=st.integers(0, 8))
def test_a_process_is_restarted_at_most_max_restarts_times(limit: int, crashes: int) -> None:
    sup = Supervision(limit)
    done = 0
    for _ in range(crashes):
        if not sup.may_restart("node-1"):
            break
        done = sup.restarted("node-1", -9)
    assert done == min(limit, crashes)
    assert sup.restarts.get("node-1", 0) == done
    assert [e["restart"] for e in sup.events] == list(range(1, done + 1))
    assert sup.may_restart("node-2") == (limit > 0)  # every process has its own budget


def test_a_negative_limit_is_refused_with_the_value() -> None:
    with pytest.raises(ConfigError, match="--max-restarts must be >= 0, got -1"):
        Supervision(-1)


def test_the_first_failure_is_the_one_recorded() -> None:
    sup = Supervision()
    sup.failed("node-4 exited with code -9")
    sup.failed("interrupted")
    assert sup.failure == "node-4 exited with code -9"
    assert [e["event"] for e in sup.events] == ["failure"]


def _summary(reached: bool) -> RunSummary:
    return RunSummary("r1", reached, 10.0 if reached else None, 1.0, 100, 50.0, 50.0,
                      1e-9, 0.0, 1.0, 2.0, "reached" if reached else "timeout")  # fmt: skip


def test_the_record_keeps_the_coordinators_fields_and_adds_what_happened() -> None:
    sup = Supervision(3)
    sup.restarted("node-4", -9)
    written = {**_summary(True).as_dict(), "graph": "grid:3x3", "nodes": 9}
    record = run_record(sup, ClusterState(graph="grid:3x3"), _summary(True), written)
    assert record["graph"] == "grid:3x3"
    assert record["reached"] is True
    assert record["failure"] is None
    assert record["restarts"] == {"node-4": 1}
    assert record["restarts_total"] == 1
    assert record["events"][0]["process"] == "node-4"


def test_a_failed_run_has_a_record_built_from_the_live_state() -> None:
    sup = Supervision(0)
    sup.failed("node-2 exited with code 1")
    state = ClusterState(graph="line:4", expected=4, eps=1e-6, run_id="r2")
    record = run_record(sup, state, None)
    assert record["reached"] is False
    assert record["stop_reason"] == "failed"
    assert record["failure"] == "node-2 exited with code 1"
    assert (record["graph"], record["nodes"], record["eps"]) == ("line:4", 4, 1e-6)


@pytest.mark.parametrize("size", [1, 3])
def test_a_moved_command_binds_a_free_block_apart_from_the_old_one(size: int) -> None:
    old = free_port_block("127.0.0.1", size)
    extra = ["--nodes-per-process", str(size)] if size > 1 else []
    command = ["node", "--name", "n", "--bind", f"tcp://127.0.0.1:{old}", *extra]
    port, moved = moved_command(command)
    assert moved == [*command[:4], f"tcp://127.0.0.1:{port}", *extra]
    assert not set(range(port, port + size)) & set(range(old, old + size))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
    with pytest.raises(ConfigError, match="without --bind"):
        moved_command(["node", "--name", "n"])
    # The policy moves a process only when asked to.
    assert Supervision().restart_command(command) is None
    again = Supervision(new_address=True).restart_command(command)
    assert again is not None
    assert again[1][4] == f"tcp://127.0.0.1:{again[0]}"
