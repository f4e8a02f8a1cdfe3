"""The one rule for a cluster's name (check_cluster), kept by Topics and by the coordinator's
settings (tests/coordinator/run/test_service.py checks that it names ``--cluster``)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.pubsub import ANY, Topics, check_cluster

GOOD = st.from_regex(r"[A-Za-z0-9_.-]{1,64}", fullmatch=True)


@given(GOOD)
def test_a_good_name_gives_topics_that_parse_back(name: str) -> None:
    topics = Topics(check_cluster(name))
    assert topics.node_of(topics.state(7)) == 7
    assert topics.state(7).split("/")[1] == name


@given(st.text(max_size=70).filter(lambda name: name != ANY))
def test_topics_and_the_rule_refuse_the_same_names(name: str) -> None:
    good = re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name) is not None
    if good:
        assert Topics(name).cluster == name
    else:
        with pytest.raises(ConfigError, match="cluster name"):
            Topics(name)


@pytest.mark.parametrize("name", ["", "a/b", "#", "lab+1", "x" * 65, "é"])
def test_the_message_names_the_setting_and_the_value(name: str) -> None:
    with pytest.raises(ConfigError, match=f"--cluster {re.escape(repr(name))} is not valid"):
        check_cluster(name, "--cluster")


def test_the_wildcard_stands_for_every_cluster() -> None:
    assert Topics(ANY).cluster == ANY
