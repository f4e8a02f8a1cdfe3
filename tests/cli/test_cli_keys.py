"""``gossip keys init`` and the errors a node gets for a missing, unreadable or unknown key."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
from pathlib import Path

import pytest
import zmq.asyncio
from typer.testing import CliRunner

from continuized.cli.app import app
from continuized.coordinator.membership.registrar import (
    RegistrarStats,
    bound_socket,
    serve_registrations,
)
from continuized.coordinator.membership.registry import Registry
from continuized.coordinator.run.config import CoordinatorConfig, prepare


def test_keys_init_writes_every_role_and_refuses_to_overwrite(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    result = CliRunner().invoke(app, ["keys", "init", "--dir", str(keys), "--nodes", "3"])
    assert result.exit_code == 0, result.output
    for part in ("coordinator/secret.key", "node-2/secret.key", "mqtt/passwd", "mqtt/acl"):
        assert (keys / part).is_file()
    assert stat.S_IMODE((keys / "node-2" / "secret.key").stat().st_mode) == 0o600
    assert "user node-2\ntopic write gossip/+/node/2/state" in (keys / "mqtt/acl").read_text()
    again = CliRunner().invoke(app, ["keys", "init", "--dir", str(keys), "--nodes", "3"])
    assert again.exit_code == 2
    assert "--force" in again.output


def test_a_missing_or_too_open_key_is_a_clear_error(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    CliRunner().invoke(app, ["keys", "init", "--dir", str(keys), "--nodes", "1"])
    coordinator = ["node", "--coordinator", "tcp://127.0.0.1:9", "--keys"]
    missing = CliRunner().invoke(app, [*coordinator, str(keys / "node-7")])
    assert missing.exit_code == 2
    assert "no key directory at" in missing.output
    (keys / "node-0" / "secret.key").chmod(0o640)
    too_open = CliRunner().invoke(app, [*coordinator, str(keys / "node-0")])
    assert too_open.exit_code == 2
    assert "chmod 600" in too_open.output


async def run_node(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "continuized.cli.app", "node", "--host", "127.0.0.1", "--value", "1",
        "--register-timeout", "30", *args,
        stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        _, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, err.decode()


@pytest.mark.cluster
async def test_an_unknown_key_or_another_nodes_name_is_refused(tmp_path: Path) -> None:
    runner = CliRunner()
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    runner.invoke(app, ["keys", "init", "--dir", str(ours), "--nodes", "3"])
    runner.invoke(app, ["keys", "init", "--dir", str(theirs), "--nodes", "3"])
    # A stranger's node that knows our coordinator's public key, but is not in its allow-list.
    stranger = theirs / "node-0"
    identity = json.loads((stranger / "identity.json").read_text())
    identity["coordinator"] = json.loads((ours / "coordinator" / "identity.json").read_text())[
        "public"
    ]
    (stranger / "identity.json").write_text(json.dumps(identity))
    _, plan = prepare(CoordinatorConfig(graph="line:3", keys=ours / "coordinator"))
    assert plan.security is not None
    ctx = zmq.asyncio.Context()
    stats = RegistrarStats()
    try:
        with bound_socket(
            ctx, "tcp://127.0.0.1:*", secret=plan.security.secret, allowed=plan.security.allowed
        ) as sock:
            address = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            server = asyncio.ensure_future(
                serve_registrations(
                    sock, Registry(plan, "r"), stats, lambda ready: None, authenticated=True
                )
            )
            try:
                code, err = await run_node("--coordinator", address, "--keys", str(stranger))
                assert code == 2
                assert "refused this node's CURVE key" in err
                code, err = await run_node(
                    "--coordinator", address, "--keys", str(ours / "node-1"), "--name", "node-2"
                )
                assert code == 2
                assert "does not match this node's key" in err
                assert stats.impostors == 1
            finally:
                server.cancel()
    finally:
        ctx.destroy(linger=0)


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_gossip_up_insecure_still_works_and_says_so(tmp_path: Path) -> None:
    out, logs = tmp_path / "run.json", tmp_path / "logs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "continuized.cli.app", "up", "--insecure", "--graph", "line:3",
        "--rate", "100", "--until", "1e-6", "--json", str(out), "--log-dir", str(logs),
        "--metrics-file", str(tmp_path / "run.jsonl"), "--quiet",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=tmp_path,
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(proc.communicate(), 150)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    assert "INSECURE" in stderr.decode()
    summary = json.loads(out.read_text())
    assert summary["reached"] is True
    assert summary["mass_drift_rel"] <= 1e-9
    assert not (logs / "keys").exists()
    assert "not authenticated" in (logs / "node-0.log").read_text()


def test_keys_init_pool_for_a_graph_kept_if_present_and_claimed_by_nodes(tmp_path: Path) -> None:
    keys, runner = tmp_path / "keys", CliRunner()
    init = ["keys", "init", "--dir", str(keys), "--graph", "cycle:3", "--pool", "--if-missing"]
    first = runner.invoke(app, init)
    assert first.exit_code == 0, first.output
    assert sorted(p.name for p in (keys / "pool").iterdir()) == [
        "node-0", "node-1", "node-2", "ready"
    ]  # fmt: skip
    for sub in ("coordinator", "mqtt"):
        assert (keys / sub / "ready").is_file()
    secret = (keys / "coordinator" / "secret.key").read_text()
    kept = runner.invoke(app, init)  # the compose service at every `up`
    assert kept.exit_code == 0
    assert "kept" in kept.output
    assert (keys / "coordinator" / "secret.key").read_text() == secret
    other = runner.invoke(app, [*init[:5], "cycle:5", *init[6:]])
    assert other.exit_code == 2
    assert "holds keys for 3 nodes, not 5" in other.output
    # A host of 4 nodes cannot claim from a pool of 3: said before anything starts.
    node = ["node", "--coordinator", "tcp://127.0.0.1:9", "--keys-pool", str(keys / "pool")]
    exhausted = runner.invoke(app, [*node, "--nodes-per-process", "4", "--name", "h"])
    assert exhausted.exit_code == 2
    assert "exhausted" in exhausted.output


def test_spare_keys_are_in_the_allow_list_and_the_acl(tmp_path: Path) -> None:
    from continuized.gossip.files.keys import load_allow_list

    keys, runner = tmp_path / "keys", CliRunner()
    bad = runner.invoke(app, ["keys", "init", "--dir", str(keys), "--nodes", "3", "--spare", "-1"])
    assert bad.exit_code != 0
    assert "--spare must be >= 0, got -1" in bad.output
    result = runner.invoke(
        app, ["keys", "init", "--dir", str(keys), "--nodes", "3", "--spare", "2"]
    )
    assert result.exit_code == 0, result.output
    assert sorted(load_allow_list(keys / "coordinator" / "allow.json")) == [
        f"node-{k}" for k in range(5)
    ]
    assert (keys / "node-4" / "secret.key").exists()
    acl = (keys / "mqtt" / "acl").read_text()
    assert "user node-4\ntopic write gossip/+/node/4/state" in acl
    assert "node-5" not in acl
