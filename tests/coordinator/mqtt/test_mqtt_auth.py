"""coordinator.mqtt.auth: the policy's grants as mosquitto's acl_file, and the password hashes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.coordinator.mqtt.auth import (
    mosquitto_acl,
    mosquitto_password_line,
    parse_acl,
    parse_password_file,
    verify_password,
)
from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.access import acl_grants, mqtt_password


@given(nodes=st.integers(0, 40), per_process=st.integers(1, 9))
def test_the_acl_file_reads_back_as_the_policys_grants(nodes: int, per_process: int) -> None:
    assert parse_acl(mosquitto_acl(nodes, per_process)) == acl_grants(nodes, per_process)


def test_a_foreign_acl_line_is_refused() -> None:
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
