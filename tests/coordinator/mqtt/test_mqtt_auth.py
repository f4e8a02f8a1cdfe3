"""coordinator.mqtt.auth: the one ACL, its file form, topic matching and the password hashes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.coordinator.mqtt.auth import (
    account_of,
    acl_grants,
    filter_within,
    host_blocks,
    host_sizes,
    may,
    mosquitto_acl,
    mosquitto_password_line,
    parse_acl,
    parse_password_file,
    topic_matches,
    verify_password,
)
from continuized.gossip.errors import ConfigError
from continuized.gossip.files.keys import mqtt_password

NAMES = st.sampled_from(["gossip", "c", "node", "1", "2", "state", "control"])
TOPICS = st.lists(NAMES, min_size=1, max_size=5).map("/".join)
FILTER_LEVELS = st.one_of(NAMES, st.just("+"))


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(FILTER_LEVELS, min_size=1, max_size=5))
    if draw(st.booleans()):
        levels.append("#")
    return "/".join(levels)


@given(pattern=filters(), subscription=filters(), topic=TOPICS)
def test_a_subscription_within_a_pattern_matches_only_what_the_pattern_matches(
    pattern: str, subscription: str, topic: str
) -> None:
    if filter_within(pattern, subscription) and topic_matches(subscription, topic):
        assert topic_matches(pattern, topic)


def test_every_node_may_write_only_its_own_state_and_read_control_and_status() -> None:
    acl = acl_grants(4)
    for node in range(4):
        user = f"node-{node}"
        for other in range(4):
            assert may(acl, user, f"gossip/x/node/{other}/state", "write") == (other == node)
            assert not may(acl, user, f"gossip/x/node/{other}/state", "read")
        assert may(acl, user, "gossip/x/control", "read")
        assert not may(acl, user, "gossip/x/control", "write")
        assert may(acl, user, "gossip/x/coordinator/status", "subscribe")
        assert not may(acl, user, "gossip/x/+", "subscribe")
    assert may(acl, "coordinator", "gossip/x/node/+/state", "subscribe")
    assert not may(acl, "node-4", "gossip/x/node/4/state", "write")  # not in this run
    assert not may(acl, None, "gossip/x/control", "read")


def test_the_acl_file_reads_back_as_the_acl_and_a_foreign_line_is_refused() -> None:
    assert parse_acl(mosquitto_acl(5)) == acl_grants(5)
    with pytest.raises(ConfigError, match="pattern user"):
        parse_acl("pattern user %u\n")
    with pytest.raises(ConfigError, match="topic read a/b"):
        parse_acl("topic read a/b\n")  # no user before it


def test_passwords_verify_against_the_mosquitto_hashes() -> None:
    secret = "s" * 32
    text = "# users\n" + "".join(
        mosquitto_password_line(u, mqtt_password(secret, u)) + "\n" for u in ("coordinator", "a")
    )
    hashes = parse_password_file(text)
    assert set(hashes) == {"coordinator", "a"}
    assert verify_password(hashes["a"], mqtt_password(secret, "a"))
    assert not verify_password(hashes["a"], mqtt_password(secret, "coordinator"))
    assert not verify_password("$7$101$bm90$%%%", "x")  # not base64: no password matches
    with pytest.raises(ConfigError, match="'bob'"):
        parse_password_file("bob:plain\n")


@given(nodes=st.integers(1, 300), per_process=st.integers(2, 70))
def test_a_host_account_writes_exactly_the_state_of_the_nodes_its_process_holds(
    nodes: int, per_process: int
) -> None:
    blocks = host_blocks(nodes, per_process)
    # The launcher's split: host j holds the next host_sizes[j] ids, all of them once.
    assert [len(b) for b in blocks] == host_sizes(nodes, per_process)
    assert [k for b in blocks for k in b] == list(range(nodes))
    acl = acl_grants(nodes, per_process)
    assert not any(user.startswith("node-") for user in acl)  # no per-node accounts left
    for j, block in enumerate(blocks):
        user = f"host-{j}"
        assert {account_of(k, nodes, per_process) for k in block} == {user}
        for other in {0, nodes - 1, block[0] - 1, block[-1] + 1, *block}:
            topic = f"gossip/x/node/{other}/state"
            assert may(acl, user, topic, "write") == (other in block), (user, other)
            assert not may(acl, user, topic, "read")
        assert may(acl, user, "gossip/x/control", "subscribe")
        assert may(acl, user, "gossip/x/coordinator/status", "read")
        assert not may(acl, user, "gossip/x/control", "write")
        assert not may(acl, user, "gossip/x/node/+/state", "subscribe")
    assert account_of(nodes, nodes, per_process) == f"node-{nodes}"  # a joiner: its own
    assert parse_acl(mosquitto_acl(nodes, per_process)) == acl
