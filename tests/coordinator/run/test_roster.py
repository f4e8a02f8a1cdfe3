"""The coordinator's membership changes without a broker: views, refusals, dead nodes."""

from __future__ import annotations

import asyncio
import json

import pytest

from continuized.coordinator.figures.records import NodeView
from continuized.coordinator.membership.plan import Assignment
from continuized.coordinator.membership.registry import Known, Refused
from continuized.coordinator.run.config import CoordinatorConfig, prepare
from continuized.coordinator.run.roster import Churn
from continuized.coordinator.run.status import membership_record
from continuized.gossip.errors import ProtocolError
from continuized.gossip.exchange.membership import view_from_dict
from continuized.gossip.exchange.trace import trace_step
from continuized.gossip.wire.pubsub import Topics
from continuized.gossip.wire.schema import Register


class Outbox:
    """Stands in for the MQTT link: keeps what would be published."""

    def __init__(self) -> None:
        self.topics = Topics("t")
        self.sent: list[tuple[str, dict[str, object]]] = []
        self.connected = asyncio.Event()
        self.connected.set()
        self.connected_since = 0.0

    def publish(self, topic: str, payload: dict[str, object], qos: int = 1) -> None:
        self.sent.append((topic, payload))


def _churn(
    graph: str = "line:5", dead_after: float | None = None, metrics_period: float = 0.1
) -> tuple[Churn, Outbox]:
    config = CoordinatorConfig(
        graph=graph, rate=100.0, values="onehot", metrics_period=metrics_period
    )
    state, plan = prepare(config)
    state.epoch = 1000.0
    state.run_id = "r"
    state.phase = "running"
    state.registered = {f"n{k}": k for k in range(plan.expected)}
    out = Outbox()
    return Churn(plan, state, out, dead_after=dead_after), out  # type: ignore[arg-type]


def test_a_leave_publishes_the_next_view_ahead_of_now_and_repeats_it() -> None:
    churn, out = _churn()
    churn.on_request(json.dumps({"cmd": "leave", "name": "n4"}).encode(), now=1010.0)
    assert churn.state.departed == {4}
    topic, command = out.sent[0]
    assert topic == "gossip/t/control"
    assert command["cmd"] == "view"
    assert command["epoch"] == 1000.0
    view = view_from_dict(command["view"])
    assert view.number == 1
    assert view.members == (0, 1, 2, 3)
    assert view.start == pytest.approx(100.0 * (1010.0 + 1.0 - 1000.0))  # LEAD seconds ahead
    assert churn.state.view == view
    churn.tick(1010.5)
    assert len(out.sent) == 1  # not yet: once a second
    churn.tick(1011.1)
    assert len(out.sent) == 2
    churn.tick(1100.0)
    assert len(out.sent) == 2  # long after T_e: no more
    assert churn.state.churn[0]["kind"] == "leave"
    assert churn.state.churn[0]["name"] == "n4"


@pytest.mark.parametrize(
    ("payload", "detail"),
    [
        (b"not json", "not JSON"),
        (json.dumps({"cmd": "jump"}).encode(), "valid: leave"),
        (json.dumps({"cmd": "leave", "name": "nope"}).encode(), "no node 'nope'"),
        (json.dumps({"cmd": "leave", "name": "n2"}).encode(), "disconnected"),
        (json.dumps({"cmd": "leave"}).encode(), "names a node"),
    ],
)
def test_bad_or_impossible_leaves_are_refused_and_shown(payload: bytes, detail: str) -> None:
    churn, out = _churn()
    churn.on_request(payload, now=1010.0)
    assert out.sent == []
    assert churn.state.departed == set()
    event = churn.state.churn[-1]
    assert event["kind"] == "refused"
    assert detail in str(event["detail"])


def test_two_leaves_make_two_views_and_a_repeat_is_ignored() -> None:
    churn, out = _churn("grid:3x3")
    churn.on_request(json.dumps({"cmd": "leave", "node": 8}).encode(), now=1001.0)
    churn.on_request(json.dumps({"cmd": "leave", "node": 8}).encode(), now=1001.5)
    churn.on_request(json.dumps({"cmd": "leave", "name": "n0"}).encode(), now=1002.0)
    views = [view_from_dict(c["view"]) for _, c in out.sent]
    assert [v.number for v in views] == [1, 2]
    assert views[1].start > views[0].start
    assert churn.state.departed == {0, 8}


def test_a_silent_node_is_declared_dead() -> None:
    churn, _ = _churn(dead_after=2.0)
    for k in range(5):
        churn.state.nodes[k] = NodeView(node=k, received=1000.0 if k == 3 else 1009.0)
    churn.tick(1010.0)
    assert churn.state.departed == set()  # node 3 is silent, but n3 is the line's middle...
    assert churn.state.churn[-1]["kind"] == "refused"  # ... so it cannot be removed
    churn.tick(1011.0)
    assert len(churn.state.churn) == 1  # refused once, not at every tick
    churn2, out2 = _churn(dead_after=2.0)
    for k in range(5):
        churn2.state.nodes[k] = NodeView(node=k, received=1000.0 if k == 0 else 1009.0)
    churn2.tick(1010.0)
    assert churn2.state.departed == {0}
    assert churn2.state.churn[-1]["kind"] == "dead"
    assert out2.sent[-1][1]["change"] == {"kind": "dead", "node": 0}


def test_a_node_that_died_while_the_coordinator_was_down_is_declared_dead() -> None:
    # A restarted coordinator: every node registered (the retained membership), node 0 died
    # before the restart and never reports to this incarnation; the others do.
    churn, out = _churn(dead_after=2.0)
    for k in range(1, 5):
        churn.state.nodes[k] = NodeView(node=k, received=1010.0)
    churn.tick(1010.0)  # node 0 is counted silent from here
    assert churn.state.departed == set()
    for k in range(1, 5):
        churn.state.nodes[k] = NodeView(node=k, received=1012.0)
    churn.tick(1012.1)
    assert churn.state.departed == {0}
    assert churn.state.churn[-1]["kind"] == "dead"
    assert out.sent[-1][1]["change"] == {"kind": "dead", "node": 0}


def test_no_node_is_declared_dead_for_the_silence_of_a_broker_outage() -> None:
    churn, out = _churn("cycle:5", dead_after=2.0)
    for k in range(5):
        churn.state.nodes[k] = NodeView(node=k, received=1000.0)
    out.connected.clear()  # the broker went away at 1000: nobody's reports arrive
    churn.tick(1010.0)
    assert churn.state.departed == set()
    out.connected.set()
    out.connected_since = 1010.0  # back: silence is counted from here
    churn.tick(1011.0)
    assert churn.state.departed == set()
    churn.state.nodes[1] = NodeView(node=1, received=1011.5)
    churn.tick(1012.5)  # every node but 1 silent for 2.5 s since the reconnection
    assert churn.state.churn[0]["kind"] == "dead"


def _assignment(n: int) -> Assignment:
    return Assignment(
        "r",
        1000.0,
        tuple(f"n{k}" for k in range(n)),
        tuple(f"tcp://127.0.0.1:{7000 + k}" for k in range(n)),
        tuple((0.0,) for _ in range(n)),
    )


def test_a_join_gets_the_next_id_a_bootstrap_of_the_next_view_and_the_same_on_a_retry() -> None:
    churn, out = _churn()
    churn.state.initial = [(1.0,), (0.0,), (0.0,), (0.0,), (0.0,)]
    msg = Register("j", "tcp://127.0.0.1:7100", (4.0,), 1)
    first = churn.join(msg, "tcp://127.0.0.1:7100", _assignment(5))
    assert isinstance(first, Known)
    boot = first.bootstrap
    assert boot.node_id == 5
    assert boot.initial_value == (4.0,)
    assert len(boot.neighbors) == 2
    view = view_from_dict(out.sent[-1][1]["view"])
    assert view.members == (0, 1, 2, 3, 4, 5)
    assert boot.eta == view.eta
    assert {n.edge_index for n in boot.neighbors} == {e for e, _ in view.incident(5)}
    assert out.sent[-1][1]["addresses"] == {"5": "tcp://127.0.0.1:7100"}
    assert churn.state.initial[-1] == (4.0,)
    assert churn.state.registered["j"] == 5
    again = churn.join(msg, "tcp://127.0.0.1:7100", _assignment(5))
    assert again == first
    assert len(out.sent) == 1


def test_a_joiner_samples_the_same_trace_grid_as_the_members_of_a_big_cluster() -> None:
    """Past 200 nodes the grid step depends on n (gossip.exchange.trace.trace_step): the joiner's
    bootstrap carries the run's first n, not the members' count, so its grid times are theirs
    and the coordinator's exact curve goes on."""
    churn, _ = _churn("grid:16x16", metrics_period=0.5)
    n = churn.plan.topology.n
    churn.state.initial = [(0.0,)] * n
    joined = churn.join(
        Register("j", "tcp://127.0.0.1:7900", (1.0,), 1), "tcp://127.0.0.1:7900", _assignment(n)
    )
    assert isinstance(joined, Known)
    boot = joined.bootstrap
    assert boot.node_id == n
    members = trace_step(churn.plan.rate, churn.plan.metrics_period, n)
    assert trace_step(boot.rate, boot.metrics_period, boot.n) == members
    assert members != trace_step(boot.rate, boot.metrics_period, n + 1)  # n matters here


def test_a_join_without_a_value_is_refused() -> None:
    churn, out = _churn()
    answer = churn.join(Register("j", "tcp://127.0.0.1:7100", None, 1), "x", _assignment(5))
    assert isinstance(answer, Refused)
    assert "--value" in answer.reason
    assert out.sent == []


def test_a_leave_over_curve_is_taken_only_from_the_leaving_nodes_own_key() -> None:
    churn, out = _churn()
    why = churn.on_leave("n4", "n0", now=1010.0)  # n0's key asks n4 to leave
    assert why is not None
    assert "'n0'" in why
    assert churn.state.departed == set()
    assert out.sent == []
    assert churn.state.churn[-1]["kind"] == "refused"
    assert "forged" in churn.state.churn[-1]["detail"]
    assert churn.on_leave("nope", "nope", now=1010.0) is not None  # unknown: refused
    assert churn.on_leave("n2", "n2", now=1010.0) is not None  # would cut line:5: refused
    assert churn.on_leave("n4", "n4", now=1010.0) is None
    assert churn.state.departed == {4}
    assert churn.on_leave("n4", "n4", now=1010.5) is None  # a retry: already out, no new view
    assert len(out.sent) == 1
    assert churn.on_leave("n3", None, now=1011.0) is None  # insecure run: no key to check
    assert churn.state.departed == {3, 4}


def test_a_secured_join_carries_the_keys_both_ways() -> None:
    import dataclasses

    from continuized.coordinator.membership.security import Security

    churn, out = _churn()
    churn.state.initial = [(1.0,), (0.0,), (0.0,), (0.0,), (0.0,)]
    allowed = {f"n{k}": f"key{k}" for k in range(5)} | {"spare": "keyS"}
    security = Security("pub", "sec", allowed, mqtt_secret="s")
    churn.plan = dataclasses.replace(churn.plan, security=security, broker="mqtt://h:1883")
    answer = churn.join(Register("spare", "tcp://127.0.0.1:7100", (4.0,), 1), "x", _assignment(5))
    assert isinstance(answer, Known)
    boot = answer.bootstrap
    assert {n.key for n in boot.neighbors} == {f"key{n.peer_id}" for n in boot.neighbors}
    assert boot.broker.startswith("mqtt://node-5:")  # its own MQTT account
    assert out.sent[-1][1]["keys"] == {"5": "keyS"}  # its new neighbours admit this key


@pytest.mark.parametrize("phase", ["stopping", "done"])
def test_no_leave_join_or_death_is_taken_once_the_run_is_stopping(phase: str) -> None:
    # The finals are taken over the current members: a change accepted now would start a view
    # after the stop, and its leaver's mass would be missing from the survivors' final sum.
    churn, out = _churn(dead_after=2.0)
    churn.state.phase = phase  # type: ignore[assignment]
    why = churn.on_leave("n4", "n4", now=1010.0)
    assert why is not None
    assert phase in why
    answer = churn.join(Register("j", "tcp://127.0.0.1:7100", (4.0,), 1), "x", _assignment(5))
    assert isinstance(answer, Refused)
    assert phase in answer.reason
    for k in range(5):
        churn.state.nodes[k] = NodeView(node=k, received=1000.0 if k == 0 else 1009.0)
    churn.tick(1010.0)
    assert churn.state.departed == set()
    assert out.sent == []
    assert [e["kind"] for e in churn.state.churn] == ["refused", "refused"]
    churn.state.phase = "running"
    churn.state.nodes[0].received = 1011.0  # heard again: only the leave below changes views
    assert churn.on_leave("n4", "n4", now=1011.0) is None  # the control: running, it is taken
    assert churn.state.departed == {4}


def test_a_restarted_coordinator_restores_the_view_and_gives_a_joiner_its_bootstrap_back() -> None:
    churn, out = _churn()
    churn.state.initial = [(1.0,), (0.0,), (0.0,), (0.0,), (0.0,)]
    churn.on_request(json.dumps({"cmd": "leave", "name": "n4"}).encode(), now=1010.0)
    msg = Register("j", "tcp://127.0.0.1:7100", (4.0,), 1)
    first = churn.join(msg, "tcp://127.0.0.1:7100", _assignment(5))
    assert isinstance(first, Known)
    # What the retained status carries (JSON), read by a new coordinator's roster.
    record = json.loads(json.dumps({**membership_record(churn.state), **churn.record()}))
    again, out2 = _churn()
    again.restore(record)
    assert again.state.view == churn.state.view
    assert again.state.view is not None
    assert again.state.view.number == 2
    assert again.state.departed == {4}
    assert again.state.registered["j"] == 5
    assert again.join(msg, "tcp://127.0.0.1:7200", _assignment(5)) == first  # not a new join
    again.tick(1012.0)  # the join's view command is still due: repeated by the new roster
    assert out2.sent[-1][1]["view"] == out.sent[-1][1]["view"]
    assert out2.sent[-1][1]["addresses"] == {"5": "tcp://127.0.0.1:7100"}


def test_a_malformed_joiner_in_the_retained_membership_is_a_protocol_error() -> None:
    churn, _ = _churn()
    with pytest.raises(ProtocolError, match="membership is malformed"):
        churn.restore({"joined": {"j": "not base64!"}})
