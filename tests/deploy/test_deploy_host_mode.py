"""Host mode in the compose file: GOSSIP_NODES_PER_CONTAINER reaches ``gossip node``.

No Docker needed: the compose file is read as YAML, and the variable it sets is checked
against the node command's own environment variable.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from cli.app import app

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
