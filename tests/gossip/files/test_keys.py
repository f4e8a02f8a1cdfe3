"""Key material on disk: safe permissions, and a clear error for every bad key."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import zmq

from continuized.gossip.errors import ConfigError
from continuized.gossip.files.keys import (
    COORDINATOR,
    init_keys,
    load_allow_list,
    load_identity,
    load_mqtt_secret,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_init_writes_private_secrets_and_a_matching_allow_list(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    made = init_keys(keys, ["node-0", "node-1"], zmq.curve_keypair)
    assert mode(keys) == 0o700
    for name in (COORDINATOR, "node-0", "node-1"):
        assert mode(keys / name) == 0o700
        assert mode(keys / name / "secret.key") == 0o600
        loaded = load_identity(keys / name)
        assert loaded == made[name]
        assert loaded.coordinator == made[COORDINATOR].public
    assert mode(keys / COORDINATOR / "mqtt.secret") == 0o600
    allow = load_allow_list(keys / COORDINATOR / "allow.json")
    assert allow == {"node-0": made["node-0"].public, "node-1": made["node-1"].public}
    assert len(load_mqtt_secret(keys / COORDINATOR / "mqtt.secret")) == 64
    with pytest.raises(ConfigError, match="--force"):
        init_keys(keys, ["node-0"], zmq.curve_keypair)
    again = init_keys(keys, ["node-0"], zmq.curve_keypair, force=True)
    assert again["node-0"].public != made["node-0"].public


def test_missing_unreadable_open_or_malformed_keys_are_named(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    init_keys(keys, ["node-0"], zmq.curve_keypair)
    node = keys / "node-0"
    with pytest.raises(ConfigError, match=r"no key directory at .*nowhere.*keys init"):
        load_identity(tmp_path / "nowhere")
    (node / "secret.key").chmod(0o644)
    with pytest.raises(ConfigError, match=r"readable by others.*chmod 600"):
        load_identity(node)
    (node / "secret.key").unlink()
    with pytest.raises(ConfigError, match=r"no secret key at .*secret.key"):
        load_identity(node)
    (node / "secret.key").mkdir(mode=0o700)  # unreadable as a file, even by root
    with pytest.raises(ConfigError, match=r"cannot read the secret key"):
        load_identity(node)
    (node / "secret.key").rmdir()
    fd = (node / "secret.key").open("w")
    fd.write("too-short")
    fd.close()
    (node / "secret.key").chmod(0o600)
    with pytest.raises(ConfigError, match=r"secret.key is not a CURVE key"):
        load_identity(node)
    (node / "identity.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"not valid JSON"):
        load_identity(node)
    allow = keys / COORDINATOR / "allow.json"
    twice = json.loads(allow.read_text()) | {"node-9": json.loads(allow.read_text())["node-0"]}
    allow.write_text(json.dumps(twice))
    with pytest.raises(ConfigError, match="same key to two nodes"):
        load_allow_list(allow)


def test_bad_names_are_refused(tmp_path: Path) -> None:
    for names in (["node 0"], [COORDINATOR], ["a", "a"]):
        with pytest.raises(ConfigError):
            init_keys(tmp_path / "k", names, zmq.curve_keypair)
