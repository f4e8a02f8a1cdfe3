"""The mosquitto files and the amqtt plugins decide as gossip.wire.access does.

Both adapters are asked the same questions as the policy, for drawn runs, users and topics:
mosquitto through the ACL file it would read, evaluated here as mosquitto evaluates it, and
amqtt through its plugins loaded on the same files.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Literal

from amqtt.contexts import Action, BaseContext
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.coordinator.mqtt.amqtt_access import AclFilePlugin, PasswordFilePlugin
from continuized.coordinator.mqtt.auth import write_broker_auth
from continuized.gossip.wire.access import (
    COORDINATOR,
    OPERATOR,
    acl_grants,
    may,
    mqtt_password,
    topic_matches,
)
from continuized.gossip.wire.pubsub import ANY, Topics

SECRET = "s3cret-for-the-test-0123456789"
_AMQTT = {"write": Action.PUBLISH, "read": Action.RECEIVE, "subscribe": Action.SUBSCRIBE}


def _mosquitto_may(acl_text: str, user: str | None, topic: str, action: str) -> bool:
    """Whether mosquitto would let ``user`` publish (write) or receive (read) ``topic``.

    mosquitto's acl_file: ``user NAME`` starts a user's lines, ``topic [read|write|readwrite]
    PATTERN`` grants (readwrite when the access is left out); a client with no line that
    grants the access and matches the topic is denied, an anonymous one by lines before any
    ``user`` (there are none here).
    """
    current: str | None = None
    for raw in acl_text.splitlines():
        words = raw.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "user":
            current = words[1]
        elif words[0] == "topic" and current == user:
            access = words[1] if len(words) == 3 else "readwrite"
            if access in (action, "readwrite") and topic_matches(words[-1], topic):
                return True
    return False


def _files(directory: Path, nodes: int, per_process: int) -> tuple[str, AclFilePlugin, Path]:
    passwd, acl = write_broker_auth(directory, SECRET, nodes, per_process)
    context = BaseContext()
    context.config = AclFilePlugin.Config(acl_file=str(acl))
    return acl.read_text(), AclFilePlugin(context), passwd


@st.composite
def questions(draw: st.DrawFn) -> tuple[int, int, str | None, str, str]:
    nodes = draw(st.integers(1, 24))
    per_process = draw(st.integers(1, 7))
    known = sorted(acl_grants(nodes, per_process))
    strangers = [None, "nobody", f"node-{nodes}", "host-99", "", "node-01"]
    user = draw(st.sampled_from(known + strangers))
    topics = Topics(draw(st.sampled_from(["lab", "x", ANY])))
    node = draw(st.sampled_from([*range(nodes + 2), ANY]))
    run = draw(st.sampled_from(["r1", ANY]))
    topic = draw(
        st.sampled_from(
            [
                topics.state(node),
                topics.states,
                topics.control,
                topics.status,
                topics.membership,
                topics.submit(run),
                topics.result(run),
                topics.standing,
                f"{topics.prefix}/#",
                "gossip/#",
                "#",
                "$SYS/uptime",
                "other/lab/control",
            ]
        )
    )
    action = draw(st.sampled_from(["read", "write", "subscribe"]))
    return nodes, per_process, user, topic, action


@settings(max_examples=300, deadline=None)
@given(question=questions())
def test_mosquitto_and_amqtt_decide_as_the_policy(
    question: tuple[int, int, str | None, str, Literal["read", "write", "subscribe"]],
) -> None:
    nodes, per_process, user, topic, action = question
    expected = may(acl_grants(nodes, per_process), user, topic, action)
    with tempfile.TemporaryDirectory() as tmp:
        acl_text, plugin, _ = _files(Path(tmp), nodes, per_process)
        session = SimpleNamespace(username=user)
        assert plugin.allows(session, topic, _AMQTT[action]) == expected
        # mosquitto 2.0 grants any subscription and filters each message; its ACL is asked
        # about publishes and deliveries only (docs/security.md).
        if action != "subscribe" and "+" not in topic and "#" not in topic:
            assert _mosquitto_may(acl_text, user, topic, action) == expected


def test_amqtt_admits_each_account_with_its_derived_password_only(tmp_path: Path) -> None:
    _, _, passwd = _files(tmp_path, 5, 2)
    context = BaseContext()
    context.config = PasswordFilePlugin.Config(password_file=str(passwd))
    plugin = PasswordFilePlugin(context)

    def admits(username: str | None, password: str | None) -> bool:
        session = SimpleNamespace(username=username, password=password)
        return asyncio.run(plugin.authenticate(session=session))

    accounts = list(acl_grants(5, 2))
    assert accounts == [COORDINATOR, OPERATOR, "host-0", "host-1", "host-2"]
    for user in accounts:
        assert admits(user, mqtt_password(SECRET, user))
        assert not admits(user, mqtt_password(SECRET + "x", user))
        assert not admits(user, mqtt_password(SECRET, "node-0"))
    assert not admits("node-0", mqtt_password(SECRET, "node-0"))  # host mode: no node account
    assert not admits(None, None)
