"""The registration state machine: ids, bootstraps, refusals, re-registration, restore, and a
secure start's wait for its handshakes."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

from continuized.coordinator.membership.handshakes import HANDSHAKE_SECONDS
from continuized.coordinator.membership.plan import Assignment, Plan, build_bootstraps, natural_key
from continuized.coordinator.membership.registry import (
    Known,
    Prepare,
    Readdressed,
    Ready,
    Refused,
    Registry,
    Waiting,
)
from continuized.coordinator.membership.security import Security
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.wire.schema import Register, decode, encode


def _plan(spec: str = "line:3", values: np.ndarray | None = None, dim: int = 1) -> Plan:
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    return Plan(
        topology=topo,
        params=gossip_params("arg", q.mu_gossip, q.r_max),
        cluster="test",
        rate=100.0,
        broker="mqtt://127.0.0.1:1883",
        metrics_period=0.1,
        values=values,
        dim=dim,
        start_delay=2.0,
    )


def _reg(name: str, port: int, value: tuple[float, ...] | None = (1.0,)) -> Register:
    return Register(name=name, address=f"tcp://127.0.0.1:{port}", value=value, pid=1)


def test_natural_order_assigns_ids_and_bootstraps_carry_the_plan() -> None:
    reg = Registry(_plan(), "run-1")
    assert isinstance(reg.register(_reg("node-10", 7010, (3.0,)), now=100.0), Waiting)
    assert isinstance(reg.register(_reg("node-2", 7002, (2.0,)), now=101.0), Waiting)
    out = reg.register(_reg("node-1", 7001, (1.0,)), now=102.0)
    assert isinstance(out, Ready)
    assert out.assignment.names == ("node-1", "node-2", "node-10")
    assert out.assignment.epoch == pytest.approx(104.0)
    boots = out.bootstraps
    assert [boots[n].node_id for n in ("node-1", "node-2", "node-10")] == [0, 1, 2]
    middle = boots["node-2"]
    assert middle.initial_value == (2.0,)
    assert sorted(nb.peer_id for nb in middle.neighbors) == [0, 2]
    assert {nb.address for nb in middle.neighbors} == {
        "tcp://127.0.0.1:7001",
        "tcp://127.0.0.1:7010",
    }
    assert sum(nb.prob for nb in middle.neighbors) == pytest.approx(1.0)
    assert middle.rate == 100.0
    assert middle.cluster == "test"
    assert middle.algorithm == "arg"
    # Every bootstrap survives the wire.
    for boot in boots.values():
        assert decode(encode(boot)) == boot


def test_a_known_name_gets_the_same_bootstrap_and_a_stranger_is_refused() -> None:
    reg = Registry(_plan(), "run-1")
    for k in range(3):
        out = reg.register(_reg(f"n{k}", 7000 + k), now=0.0)
    assert isinstance(out, Ready)
    again = reg.register(_reg("n1", 7001), now=50.0)
    assert isinstance(again, Known)
    assert again.bootstrap == out.bootstraps["n1"]
    stranger = reg.register(_reg("n9", 7009), now=50.0)
    assert isinstance(stranger, Refused)
    assert "n9" in stranger.reason
    assert "3 nodes" in stranger.reason


@pytest.mark.parametrize(
    ("msg", "words"),
    [
        (Register("", "tcp://127.0.0.1:1", (1.0,), 1), "name"),
        (Register("a", "udp://127.0.0.1:1", (1.0,), 1), "tcp://host:port"),
        (Register("a", "tcp://127.0.0.1:1", (1.0, 2.0), 1), "2 component"),
        (Register("a", "tcp://127.0.0.1:1", None, 1), "without a value"),
        (Register("a", "tcp://0.0.0.0:1", (1.0,), 1), "wildcard"),
    ],
)
def test_bad_registrations_are_refused_with_a_reason(msg: Register, words: str) -> None:
    reg = Registry(_plan(), "run-1")
    out = reg.register(msg, now=0.0)
    assert isinstance(out, Refused)
    assert words in out.reason
    assert reg.names == []


def test_wildcard_host_is_replaced_by_the_peer_ip() -> None:
    reg = Registry(_plan(), "run-1")
    reg.register(Register("a", "tcp://0.0.0.0:7000", (1.0,), 1), now=0.0, peer_host="10.1.2.3")
    reg.register(_reg("b", 7001), now=0.0)
    out = reg.register(_reg("c", 7002), now=0.0)
    assert isinstance(out, Ready)
    assert out.assignment.addresses[0] == "tcp://10.1.2.3:7000"


def test_address_taken_by_another_name_and_full_cluster_are_refused() -> None:
    reg = Registry(_plan("line:2"), "run-1")
    reg.register(_reg("a", 7000), now=0.0)
    taken = reg.register(_reg("b", 7000), now=0.0)
    assert isinstance(taken, Refused)
    assert "already registered" in taken.reason
    # The same name again (a restarted node) replaces its record instead.
    assert isinstance(reg.register(_reg("a", 7005), now=0.0), Waiting)
    # ... and frees its old address: another name may take it, but not a's new one.
    assert isinstance(reg.register(_reg("c", 7005), now=0.0), Refused)
    assert reg.count == 1
    assert not isinstance(reg.register(_reg("b", 7000), now=0.0), Refused)


def test_experiment_values_override_and_nodes_may_omit_theirs() -> None:
    values = np.array([[1.0, 2.0], [0.0, 0.0]])
    reg = Registry(_plan("line:2", values=values, dim=2), "run-1")
    reg.register(_reg("a", 7000, None), now=0.0)
    out = reg.register(_reg("b", 7001, (5.0, 5.0)), now=0.0)
    assert isinstance(out, Ready)
    assert out.bootstraps["a"].initial_value == (1.0, 2.0)
    assert out.bootstraps["b"].initial_value == (0.0, 0.0)
    assert out.bootstraps["a"].dim == 2


def test_restore_rebuilds_identical_bootstraps() -> None:
    plan = _plan()
    reg = Registry(plan, "run-1")
    for k in range(3):
        out = reg.register(_reg(f"n{k}", 7000 + k, (float(k),)), now=10.0)
    assert isinstance(out, Ready)
    data = out.assignment.as_dict()
    other = Registry(plan, "ignored")
    other.restore(Assignment.from_dict(data))
    again = other.register(_reg("n2", 7002), now=99.0)
    assert isinstance(again, Known)
    assert again.bootstrap == out.bootstraps["n2"]
    assert build_bootstraps(plan, out.assignment)[2] == out.bootstraps["n2"]


def test_a_node_restarted_on_a_new_address_is_recorded_there_for_its_neighbours() -> None:
    plan = _plan()
    reg = Registry(plan, "run-1")
    for k in range(3):
        out = reg.register(_reg(f"n{k}", 7000 + k), now=0.0)
    assert isinstance(out, Ready)
    moved = reg.register(_reg("n1", 7101, (9.0,)), now=50.0)
    assert isinstance(moved, Readdressed)
    assert moved.previous == "tcp://127.0.0.1:7001"
    # Same id, same everything (its value is the run's, not the one it sent again) ...
    assert moved.bootstrap == out.bootstraps["n1"]
    assert moved.assignment.addresses == (
        "tcp://127.0.0.1:7000",
        "tcp://127.0.0.1:7101",
        "tcp://127.0.0.1:7002",
    )
    assert moved.assignment.epoch == out.assignment.epoch
    # ... and a neighbour restarted later is sent to the new address.
    later = reg.register(_reg("n0", 7000), now=60.0)
    assert isinstance(later, Known)
    assert [nb.address for nb in later.bootstrap.neighbors] == ["tcp://127.0.0.1:7101"]
    # A coordinator that resumes from the published assignment knows it too.
    other = Registry(plan, "ignored")
    other.restore(Assignment.from_dict(moved.assignment.as_dict()))
    assert isinstance(other.register(_reg("n1", 7101), now=70.0), Known)
    # Another node's address is still refused, and a wildcard takes the sender's IP.
    taken = reg.register(_reg("n2", 7000), now=80.0)
    assert isinstance(taken, Refused)
    assert "'n0'" in taken.reason
    wild = reg.register(Register("n2", "tcp://0.0.0.0:7202", None, 1), 90.0, "10.0.0.8")
    assert isinstance(wild, Readdressed)
    assert wild.assignment.addresses[2] == "tcp://10.0.0.8:7202"


def test_natural_key_orders_numbers_numerically() -> None:
    assert sorted(["n10", "n9", "n1"], key=natural_key) == ["n1", "n9", "n10"]


def test_a_secure_registry_sets_the_epoch_after_the_cross_process_handshakes() -> None:
    names = [f"node-{k}" for k in range(4)]
    security = Security("pub", "sec", {name: f"key-{name}" for name in names})
    registry = Registry(replace(_plan("line:4"), security=security), "run-1")
    out = None
    for k, name in enumerate(names):  # node-0, node-1 in process 1; node-2, node-3 in 2
        register = Register(name, f"tcp://127.0.0.1:{7000 + k}", (1.0,), pid=1 + k // 2)
        out = registry.register(register, now=100.0)
    assert isinstance(out, Ready)
    one_edge = HANDSHAKE_SECONDS * 2 / (os.cpu_count() or 1)  # only (1, 2) joins two
    assert out.assignment.epoch == pytest.approx(100.0 + 2.0 + one_edge)


def test_the_epoch_is_fixed_once_the_last_node_is_ready() -> None:
    """Nodes that must set up register not ready: at the count each gets its draft (its id,
    no epoch), and t = 0 is fixed only when the last of them is ready, the start delay later;
    a node that registered ready (an older one) waits for them, unanswered."""
    reg = Registry(_plan(), "run-1")
    assert isinstance(reg.register(replace(_reg("n0", 7000), ready=False), now=1.0), Waiting)
    assert isinstance(reg.register(_reg("n1", 7001), now=2.0), Waiting)
    out = reg.register(replace(_reg("n2", 7002), ready=False), now=3.0)
    assert isinstance(out, Prepare)
    assert sorted(out.drafts) == ["n0", "n2"]
    assert all(boot.draft for boot in out.drafts.values())
    assert [out.drafts[n].node_id for n in ("n0", "n2")] == [0, 2]
    assert not reg.bootstrapped
    # A re-send, or a node restarted while it set up, gets its draft again.
    again = reg.register(replace(_reg("n2", 7002), ready=False), now=5.0)
    assert again == Prepare({"n2": out.drafts["n2"]})
    assert isinstance(reg.register(_reg("n0", 7000), now=20.0), Waiting)
    done = reg.register(_reg("n2", 7002), now=30.0)
    assert isinstance(done, Ready)
    assert done.assignment.epoch == pytest.approx(32.0)  # the last ready + start_delay 2.0
    for name, boot in done.bootstraps.items():
        assert not boot.draft
        assert boot.node_id == done.assignment.names.index(name)
    assert {n: b.node_id for n, b in done.bootstraps.items()} == {"n0": 0, "n1": 1, "n2": 2}


def test_a_draft_names_what_the_bootstrap_will_name_but_the_epoch() -> None:
    reg = Registry(_plan("cycle:4"), "run-1")
    drafts: dict[str, object] = {}
    for k in range(4):
        out = reg.register(replace(_reg(f"n{k}", 7000 + k, (float(k),)), ready=False), 0.0)
    assert isinstance(out, Prepare)
    drafts = dict(out.drafts)
    for k in range(4):
        out = reg.register(_reg(f"n{k}", 7000 + k, (float(k),)), now=10.0)
    assert isinstance(out, Ready)
    for name, boot in out.bootstraps.items():
        assert replace(boot, epoch=0.0) == drafts[name]
