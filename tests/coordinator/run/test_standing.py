"""coordinator.run.standing: what a submission may change, and how a bad one is named."""

from __future__ import annotations

import pytest

from continuized.coordinator.run.config import CoordinatorConfig
from continuized.coordinator.run.standing import SUBMIT_FIELDS, parse_submission, submitted_config
from continuized.gossip.errors import ConfigError
from continuized.gossip.wire.access import OPERATOR, acl_grants, may

BASE = CoordinatorConfig(graph="cycle:6", values="onehot", broker="mqtt://127.0.0.1:1883")


def test_a_submission_changes_only_what_it_names() -> None:
    config = submitted_config(
        BASE, parse_submission(b'{"algorithm": "rg", "rate": 250, "values": "gaussian:4"}')
    )
    assert (config.algorithm, config.rate, config.values) == ("rg", 250.0, "gaussian:4")
    assert (config.graph, config.until, config.bind) == (BASE.graph, BASE.until, BASE.bind)
    assert config.resume is False  # a submitted run is always a new run
    assert submitted_config(BASE, {"timeout": 30.0}).run_timeout == 30.0
    assert submitted_config(BASE, {"graph": "line:6"}).graph == "line:6"  # same node count


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        (b"[1, 2]", "JSON object"),
        (b"{nope", "JSON object"),
        (b'{"ratee": 3}', "'ratee'"),
        (b'{"rate": "fast"}', "rate must be a number, got 'fast'"),
        (b'{"rate": true}', "rate must be a number, got True"),
        (b'{"graph": 6}', "graph must be a string, got 6"),
    ],
)
def test_a_malformed_submission_is_named(payload: bytes, named: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_submission(payload)
    assert named in str(refused.value)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"rate": 0.0}, "--rate must be a finite number > 0, got 0.0"),
        ({"until": -1.0}, "--until"),
        ({"algorithm": "adam"}, "'adam'"),
        ({"graph": "grid:3x3"}, "graph 'grid:3x3' has 9 nodes but the standing cluster has 6"),
        ({"values": "gaussian:x"}, "gaussian:x"),
    ],
)
def test_a_bad_value_is_refused_naming_it(changes: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError) as refused:
        submitted_config(BASE, changes)
    assert named in str(refused.value)


def test_every_field_a_submission_may_set_is_a_setting() -> None:
    for field in SUBMIT_FIELDS:
        name = "run_timeout" if field == "timeout" else field
        assert hasattr(BASE, name), field


def test_the_operator_may_only_submit_and_read_results() -> None:
    acl = acl_grants(3)
    assert may(acl, OPERATOR, "gossip/lab/submit/r1", "write")
    assert may(acl, OPERATOR, "gossip/lab/result/r1", "read")
    assert may(acl, OPERATOR, "gossip/lab/standing", "subscribe")
    for topic in ("gossip/lab/control", "gossip/lab/node/0/state", "gossip/lab/coordinator/status"):
        assert not may(acl, OPERATOR, topic, "write"), topic
    assert not may(acl, OPERATOR, "gossip/lab/node/0/state", "read")
    assert not may(acl, OPERATOR, "gossip/lab/result/r1", "write")  # no forged answers
    for node in range(3):
        assert not may(acl, f"node-{node}", "gossip/lab/submit/r1", "write")
