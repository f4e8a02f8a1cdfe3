"""gossip.wire.access: the accounts, their grants, the one decision and the topic matching."""

from __future__ import annotations

import pytest
from aiomqtt import Topic
from hypothesis import given
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.access import (
    COORDINATOR,
    account_of,
    acl_grants,
    filter_within,
    host_blocks,
    host_sizes,
    may,
    mqtt_password,
    topic_matches,
)
from continuized.gossip.wire.pubsub import Topics

NAMES = st.sampled_from(["gossip", "c", "node", "1", "2", "state", "control"])
TOPICS = st.lists(NAMES, min_size=1, max_size=5).map("/".join)
FILTER_LEVELS = st.one_of(NAMES, st.just("+"))
# Any level at all, the odd ones included: empty, "$", wildcards inside a name, "$share".
ODD_LEVELS = st.sampled_from(["", "$SYS", "$share", "a+", "#b", "+", "#", "x", "gossip", "$"])


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(FILTER_LEVELS, min_size=1, max_size=5))
    if draw(st.booleans()):
        levels.append("#")
    return "/".join(levels)


def _aiomqtt_matches(pattern: str, topic: str) -> bool:
    """What the project asked aiomqtt before gossip.wire.access matched topics itself."""
    if topic.startswith("$") and pattern.split("/", 1)[0] in ("+", "#"):
        return False
    try:
        return Topic(topic).matches(pattern)
    except ValueError:
        return False


@given(
    pattern=st.one_of(filters(), st.lists(ODD_LEVELS, max_size=5).map("/".join)),
    topic=st.one_of(TOPICS, st.lists(ODD_LEVELS, max_size=5).map("/".join)),
)
def test_topics_match_as_aiomqtt_and_mosquitto_match_them(pattern: str, topic: str) -> None:
    assert topic_matches(pattern, topic) == _aiomqtt_matches(pattern, topic)


def test_a_topic_or_filter_too_long_for_mqtt_matches_nothing() -> None:
    long = "a/" * 32768
    assert not topic_matches("#", long + "b")
    assert not topic_matches(long + "#", "a/b")


@given(pattern=filters(), subscription=filters(), topic=TOPICS)
def test_a_subscription_within_a_pattern_matches_only_what_the_pattern_matches(
    pattern: str, subscription: str, topic: str
) -> None:
    if filter_within(pattern, subscription) and topic_matches(subscription, topic):
        assert topic_matches(pattern, topic)


def test_every_node_may_write_only_its_own_state_and_read_control_and_status() -> None:
    acl = acl_grants(4)
    topics = Topics("x")
    for node in range(4):
        user = f"node-{node}"
        for other in range(4):
            assert may(acl, user, topics.state(other), "write") == (other == node)
            assert not may(acl, user, topics.state(other), "read")
        assert may(acl, user, topics.control, "read")
        assert not may(acl, user, topics.control, "write")
        assert may(acl, user, topics.status, "subscribe")
        assert not may(acl, user, "gossip/x/+", "subscribe")
    assert may(acl, COORDINATOR, topics.states, "subscribe")
    assert not may(acl, "node-4", topics.state(4), "write")  # not in this run
    assert not may(acl, None, topics.control, "read")


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


def test_a_host_split_needs_at_least_one_node_per_process() -> None:
    with pytest.raises(ConfigError, match="got 0"):
        host_sizes(4, 0)


@given(secret=st.text(min_size=16, max_size=40), a=st.integers(0, 10**6), b=st.integers(0, 10**6))
def test_passwords_differ_per_user_and_per_secret(secret: str, a: int, b: int) -> None:
    pa, pb = mqtt_password(secret, f"node-{a}"), mqtt_password(secret, f"node-{b}")
    assert pa == mqtt_password(secret, f"node-{a}")
    assert (pa == pb) == (a == b)
    assert pa != mqtt_password(secret + "x", f"node-{a}")
