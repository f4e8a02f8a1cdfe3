"""Host mode in the compose file: GOSSIP_NODES_PER_CONTAINER reaches ``gossip node``.

No Docker needed: the compose file is read as YAML, and the variable it sets is checked
against the node command's own environment variable.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from continuized.cli.app import app

ROOT = Path(__file__).resolve().parents[2]


def test_nodes_per_container_sets_the_node_commands_nodes_per_process() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    env = compose["services"]["node"]["environment"]
    assert env["GOSSIP_NODES_PER_PROCESS"] == "${GOSSIP_NODES_PER_CONTAINER:-1}"
    # ... which is the variable `gossip node --nodes-per-process` reads.
    result = CliRunner().invoke(
        app,
        ["node", "--coordinator", "tcp://127.0.0.1:9"],
        env={"GOSSIP_NODES_PER_PROCESS": "0"},
    )
    assert result.exit_code == 2
    assert "--nodes-per-process must be >= 1, got 0" in result.output


def test_each_service_mounts_only_its_own_keys() -> None:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]

    def volumes(service: str) -> set[str]:
        return {v.split(":")[0] for v in services[service].get("volumes", []) if "keys" in v}

    # Nodes never see the coordinator's secret key or the MQTT secret; the broker only hashes.
    assert volumes("keys") == {"keys-coordinator", "keys-pool", "keys-mqtt"}
    assert volumes("coordinator") == {"keys-coordinator"}
    assert volumes("node") == {"keys-pool"}
    assert volumes("mosquitto") == {"keys-mqtt"}
    assert services["node"]["environment"]["GOSSIP_KEYS_POOL"] == "/keys/pool"
    assert services["coordinator"]["environment"]["GOSSIP_KEYS"] == "/keys/coordinator"
    # Secure unless GOSSIP_INSECURE is set, in every service that reads it.
    for service in ("keys", "mosquitto", "coordinator", "node"):
        assert services[service]["environment"]["GOSSIP_INSECURE"] == "${GOSSIP_INSECURE:-0}"
