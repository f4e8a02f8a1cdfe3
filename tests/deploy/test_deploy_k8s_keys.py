"""The keys path of deploy/k8s, run for real without a cluster.

``gossip keys init --pool`` (the keys Job's command) writes real keys; the Job's upload script
(deploy/k8s/scripts/upload_keys.py) stores them through a stand-in of the Kubernetes API (an
HTTP server on loopback that keeps Secrets as the API does); the Secrets are laid out as the
kubelet mounts them (files linked into a hidden ``..data`` directory, group-readable); and the
pods' init container script (own_keys.sh) gives the coordinator its keys and each node pod its
own key pair(s), which the node's key-pool claim and the key loader then accept.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from k8s_manifests import K8S, ROOT

SCRIPTS = K8S / "scripts"
TOKEN = "test-token"
NAMESPACE = "gossip-test"


class FakeApi(ThreadingHTTPServer):
    """GET and POST of the namespace's Secrets, behind a bearer token, as the API answers."""

    secrets: dict[str, dict[str, Any]]
    posts: int


class _Handler(BaseHTTPRequestHandler):
    server: FakeApi
    prefix = f"/api/v1/namespaces/{NAMESPACE}/secrets"

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorised(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {TOKEN}":
            return True
        self._answer(401, {"kind": "Status", "code": 401})
        return False

    def do_GET(self) -> None:
        if not self._authorised():
            return
        name = self.path.removeprefix(self.prefix + "/")
        if self.path.startswith(self.prefix + "/") and name in self.server.secrets:
            self._answer(200, self.server.secrets[name])
        else:
            self._answer(404, {"kind": "Status", "code": 404})

    def do_POST(self) -> None:
        if not self._authorised():
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        name = body["metadata"]["name"]
        if self.path != self.prefix or name in self.server.secrets:
            self._answer(409, {"kind": "Status", "code": 409})
            return
        self.server.secrets[name] = body
        self.server.posts += 1
        self._answer(201, body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[FakeApi]:
    server = FakeApi(("127.0.0.1", 0), _Handler)
    server.secrets, server.posts = {}, 0
    thread = threading.Thread(target=server.serve_forever, name="fake-k8s-api", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``made(graph, tag)``: the keys of one ``gossip keys init`` for ``graph``, made once per
    module and tag (a new tag: another generation of keys)."""
    cache: dict[tuple[str, str], Path] = {}

    def get(graph: str, tag: str = "first") -> Path:
        if (graph, tag) not in cache:
            where = tmp_path_factory.mktemp("keys") / "keys"
            cache[graph, tag] = keys_init(where, graph)
        return cache[graph, tag]

    return get


def keys_init(where: Path, graph: str) -> Path:
    """The keys Job's `gossip keys init`, into ``where``."""
    done = subprocess.run(
        [
            sys.executable,
            *["-m", "continuized.cli.app", "keys", "init", "--pool", "--if-missing"],
            "--dir",
            str(where),
            "--graph",
            graph,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return where


def upload(
    keys: Path, api: FakeApi, tmp_path: Path, token: str = TOKEN
) -> subprocess.CompletedProcess[str]:
    """The keys Job's upload, with a service account pointed at the stand-in API."""
    account = tmp_path / "serviceaccount"
    account.mkdir(exist_ok=True)
    (account / "token").write_text(token + "\n")
    (account / "namespace").write_text(NAMESPACE + "\n")
    env = {
        **os.environ,
        "K8S_API_URL": f"http://127.0.0.1:{api.server_address[1]}",
        "K8S_SERVICE_ACCOUNT_DIR": str(account),
    }
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "upload_keys.py"), str(keys)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def mount(secret: dict[str, Any], where: Path) -> Path:
    """Lay ``secret`` out as the kubelet mounts a Secret volume (defaultMode 0444)."""
    data = where / "..2026_11_27_00_00_00.000000001"
    data.mkdir(parents=True)
    for key, value in secret["data"].items():
        path = data / key
        path.write_bytes(base64.b64decode(value))
        path.chmod(0o444)
    (where / "..data").symlink_to(data.name)
    for key in secret["data"]:
        (where / key).symlink_to(f"..data/{key}")
    return where


def own_keys(role: str, src: Path, dest: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The pods' init container script, into ``dest`` made as an emptyDir is (mode 0777)."""
    dest.mkdir(parents=True, exist_ok=True)
    dest.chmod(0o777)
    return subprocess.run(
        ["sh", str(SCRIPTS / "own_keys.sh"), role, str(src), str(dest)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_scripts_parse() -> None:
    for script in (SCRIPTS / "own_keys.sh", ROOT / "deploy" / "entrypoint.sh"):
        done = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_the_job_stores_the_keys_in_three_valid_secrets_once(
    api: FakeApi, tmp_path: Path, made: Any
) -> None:
    keys = made("cycle:4")
    done = upload(keys, api, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "created" in done.stdout
    assert set(api.secrets) == {
        "gossip-coordinator-keys",
        "gossip-node-keys",
        "gossip-mqtt-accounts",
    }
    for secret in api.secrets.values():
        kubernetes_validate.validate(secret, kubernetes_validate.latest_version(), strict=True)
        assert secret["metadata"]["annotations"]["continuized-gossip/nodes"] == "4"
    nodes = api.secrets["gossip-node-keys"]["data"]
    assert sorted(nodes) == sorted(
        [f"node-{k}.{f}" for k in range(4) for f in ("identity.json", "secret.key")] + ["ready"]
    )
    secret_key = (keys / "pool" / "node-2" / "secret.key").read_bytes()
    assert base64.b64decode(nodes["node-2.secret.key"]) == secret_key
    # The nodes' secrets are not in the broker's or the coordinator's Secret.
    for other in ("gossip-coordinator-keys", "gossip-mqtt-accounts"):
        assert not any(
            k.endswith("secret.key") and k != "secret.key" for k in api.secrets[other]["data"]
        )
    assert set(api.secrets["gossip-mqtt-accounts"]["data"]) == {"passwd", "acl", "ready"}

    # Run again (a retried Job): new keys of the same count are dropped, the Secrets kept.
    stored = json.dumps(api.secrets, sort_keys=True)
    again = upload(made("cycle:4", "again"), api, tmp_path)
    assert again.returncode == 0, again.stderr
    assert "kept" in again.stdout
    assert json.dumps(api.secrets, sort_keys=True) == stored
    assert api.posts == 3


def test_keys_for_another_count_or_a_partial_set_are_an_error_naming_the_fix(
    api: FakeApi, tmp_path: Path, made: Any
) -> None:
    assert upload(made("cycle:4"), api, tmp_path).returncode == 0
    other = upload(made("cycle:5"), api, tmp_path)
    assert other.returncode == 1
    said = " ".join(other.stderr.split())
    assert "keys for ['4'] nodes, not 5" in said
    assert "kubectl delete secret gossip-coordinator-keys gossip-node-keys" in said
    del api.secrets["gossip-mqtt-accounts"]
    partial = upload(made("cycle:4", "again"), api, tmp_path)
    assert partial.returncode == 1
    assert "missing gossip-mqtt-accounts" in " ".join(partial.stderr.split())


def test_a_wrong_token_is_refused_by_the_api_and_the_job_says_so(
    api: FakeApi, tmp_path: Path, made: Any
) -> None:
    keys = made("cycle:3")
    done = upload(keys, api, tmp_path, token="stale")
    assert done.returncode == 1
    assert "HTTP 401" in done.stderr
    assert not api.secrets


def test_each_pod_gets_only_its_own_keys_which_gossip_accepts(
    api: FakeApi, tmp_path: Path, made: Any
) -> None:
    from continuized.gossip.files.keys import load_allow_list, load_identity
    from continuized.node.transport.keypool import claim_keys

    assert upload(made("cycle:4"), api, tmp_path).returncode == 0
    node_src = mount(api.secrets["gossip-node-keys"], tmp_path / "secret-nodes")
    coordinator_src = mount(api.secrets["gossip-coordinator-keys"], tmp_path / "secret-coord")

    # The coordinator: its four files, private, and the allow-list of the four nodes.
    dest = tmp_path / "pod-coordinator"
    done = own_keys("coordinator", coordinator_src, dest)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in dest.iterdir()} == {
        "identity.json",
        "secret.key",
        "allow.json",
        "mqtt.secret",
        "ready",
    }
    assert _mode(dest / "secret.key") == 0o600
    assert load_identity(dest).name == "coordinator"
    assert len(load_allow_list(dest / "allow.json")) == 4

    # Pod node-2, one node per pod: a pool holding node-2 only, which the node claims.
    pool = tmp_path / "pod-node-2"
    done = own_keys("node", node_src, pool, POD_NAME="node-2", GOSSIP_NODES_PER_PROCESS="1")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in pool.iterdir()) == ["node-2", "ready"]
    assert _mode(pool / "node-2") == 0o700
    assert _mode(pool / "node-2" / "secret.key") == 0o600
    lease = claim_keys(pool, ["node-2"])
    try:
        assert [load_identity(k).name for k in lease.keys] == ["node-2"]
    finally:
        lease.release()

    # Two nodes per pod: pod node-1 holds node-2 and node-3.
    pool = tmp_path / "pod-node-1-of-2"
    done = own_keys("node", node_src, pool, POD_NAME="node-1", GOSSIP_NODES_PER_PROCESS="2")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in pool.iterdir()) == ["node-2", "node-3", "ready"]


def test_a_pod_beyond_the_graph_or_without_keys_stops_with_the_fix(
    api: FakeApi, tmp_path: Path, made: Any
) -> None:
    assert upload(made("cycle:4"), api, tmp_path).returncode == 0
    node_src = mount(api.secrets["gossip-node-keys"], tmp_path / "secret-nodes")
    done = own_keys("node", node_src, tmp_path / "pod-node-4", POD_NAME="node-4")
    assert done.returncode == 1
    said = " ".join(done.stderr.split())
    assert "pod node-4 has no key node-4: the keys are for 4 nodes" in said
    assert "set replicas of node in deploy/k8s/kustomization.yaml to 4" in said
    assert not (tmp_path / "pod-node-4" / "ready").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    done = own_keys("coordinator", empty, tmp_path / "pod-coordinator")
    assert done.returncode == 1
    assert "has the gossip-keys Job run?" in done.stderr


def _entrypoint(tmp_path: Path, advertise: str) -> subprocess.Popen[str]:
    """The image's entrypoint for a Kubernetes node pod, with a stand-in ``gossip`` that prints
    what it was started with."""
    stand_in = tmp_path / "bin"
    stand_in.mkdir(exist_ok=True)
    gossip = stand_in / "gossip"
    gossip.write_text('#!/bin/sh\necho "gossip $* as $GOSSIP_NAME"\n')
    gossip.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{stand_in}:{os.environ['PATH']}",
        "GOSSIP_BIND": f"tcp://{advertise}:7000",
        "GOSSIP_ADVERTISE": advertise,
        "GOSSIP_COORDINATOR": "tcp://coordinator:5555",
    }
    return subprocess.Popen(
        ["sh", str(ROOT / "deploy" / "entrypoint.sh"), "node"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_a_node_binding_its_dns_name_waits_until_it_resolves(tmp_path: Path) -> None:
    # A name that resolves: the node starts at once, named after its host (the pod's name).
    resolved = _entrypoint(tmp_path, "localhost")
    out, err = resolved.communicate(timeout=60)
    assert resolved.returncode == 0, err
    assert out.startswith("gossip node as "), out
    assert "waiting until" not in err
    # One that does not resolve yet: it waits, and says for what.
    waiting = _entrypoint(tmp_path, "node-0.node.invalid")
    try:
        assert waiting.stderr is not None
        line = waiting.stderr.readline()
        assert line.strip() == "waiting until node-0.node.invalid resolves", line
        assert waiting.poll() is None
    finally:
        waiting.kill()
        waiting.communicate(timeout=30)


def _role_env(kind: str, name: str, **over: str) -> dict[str, str]:
    """The environment deploy/k8s gives a role's container, with ``over`` for loopback, and
    no GOSSIP_* variable of this process's own."""
    from k8s_manifests import container, environment, find

    ours = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    return {**ours, **environment(container(find(kind, name), name)), **over}


@pytest.mark.cluster
@pytest.mark.broker
@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_secure_run_reaches_eps_with_the_keys_of_the_kubernetes_path(
    api: FakeApi, tmp_path: Path, made: Any
) -> None:
    """The whole keys path, then a run: keys Job -> Secrets -> init containers -> a real
    mosquitto with the Secret's node accounts, the coordinator and one process per node pod
    (through the image's entrypoint), each with deploy/k8s's environment, on loopback."""
    from continuized.coordinator.local.broker import MosquittoAuth, find_mosquitto, mosquitto_broker
    from continuized.coordinator.machine.ports import free_ports

    nodes = 3
    assert upload(made(f"cycle:{nodes}"), api, tmp_path).returncode == 0
    coordinator_keys = tmp_path / "pod-coordinator"
    src = mount(api.secrets["gossip-coordinator-keys"], tmp_path / "secret-coordinator")
    assert own_keys("coordinator", src, coordinator_keys).returncode == 0
    src = mount(api.secrets["gossip-node-keys"], tmp_path / "secret-nodes")
    for k in range(nodes):
        assert (
            own_keys("node", src, tmp_path / f"pod-node-{k}", POD_NAME=f"node-{k}").returncode == 0
        )
    # The broker as its entrypoint sets it up: the cluster account, then the Secret's accounts.
    accounts = mount(api.secrets["gossip-mqtt-accounts"], tmp_path / "secret-mqtt")
    passwd, acl = tmp_path / "passwd", tmp_path / "acl"
    binary = find_mosquitto()
    if binary is None and os.environ.get("CI") != "true":
        pytest.skip("mosquitto is not installed")
    assert binary is not None, "mosquitto is not installed (scripts/system-deps installs it)"
    made_passwd = await asyncio.create_subprocess_exec(
        "mosquitto_passwd", "-b", "-c", str(passwd), "gossip", "gossip"
    )
    assert await made_passwd.wait() == 0
    passwd.write_text(passwd.read_text() + (accounts / "passwd").read_text())
    acl.write_text("user gossip\ntopic readwrite gossip/#\n\n" + (accounts / "acl").read_text())

    # `gossip` on the PATH of the image's entrypoint: this checkout's.
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    (stand_in / "gossip").write_text(
        f'#!/bin/sh\nexec {sys.executable} -m continuized.cli.app "$@"\n'
    )
    (stand_in / "gossip").chmod(0o755)
    path = f"{stand_in}:{os.environ['PATH']}"
    register, dashboard = free_ports(2)
    auth = MosquittoAuth(passwd, acl)
    async with mosquitto_broker(binary, auth=auth) as broker:
        summary = tmp_path / "summary.json"
        coordinator_env = _role_env(
            "Deployment",
            "coordinator",
            PATH=path,
            GOSSIP_GRAPH=f"cycle:{nodes}",
            GOSSIP_BROKER=f"mqtt://gossip:gossip@127.0.0.1:{broker.port}",
            GOSSIP_BIND=f"tcp://127.0.0.1:{register}",
            GOSSIP_DASHBOARD_PORT=str(dashboard),
            GOSSIP_DASHBOARD_HOST="127.0.0.1",
            GOSSIP_KEYS=str(coordinator_keys),
            GOSSIP_KEYS_WAIT=str(coordinator_keys / "ready"),
            GOSSIP_HOLD="0",
        )
        assert _role_env("Deployment", "coordinator")["GOSSIP_KEYS"] == "/keys/coordinator"
        entry = str(ROOT / "deploy" / "entrypoint.sh")
        logs = tmp_path / "logs"
        logs.mkdir()
        with (logs / "coordinator.log").open("w") as log:
            coordinator = await asyncio.create_subprocess_exec(
                *["sh", entry, "coordinator", "--json", str(summary)],
                env=coordinator_env,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
            )
        pods = []
        for k in range(nodes):
            pool = tmp_path / f"pod-node-{k}"
            env = _role_env(
                "StatefulSet",
                "node",
                PATH=path,
                GOSSIP_COORDINATOR=f"tcp://127.0.0.1:{register}",
                # Loopback stands in for node-K.node (a name that resolves, then bound).
                GOSSIP_BIND="tcp://127.0.0.1:0",
                GOSSIP_ADVERTISE="127.0.0.1",
                GOSSIP_KEYS_POOL=str(pool),
                GOSSIP_KEYS_WAIT=str(pool / "ready"),
                GOSSIP_NAME=f"node-{k}",  # the entrypoint's: the pod's hostname
            )
            with (logs / f"node-{k}.log").open("w") as log:
                pods.append(
                    await asyncio.create_subprocess_exec(
                        *["sh", entry, "node"],
                        env=env,
                        stdout=log,
                        stderr=asyncio.subprocess.STDOUT,
                    )
                )
        try:
            code = await asyncio.wait_for(coordinator.wait(), 240)
            codes = [await asyncio.wait_for(pod.wait(), 60) for pod in pods]
        finally:
            for proc in [coordinator, *pods]:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        said = "\n".join(f"{p.name}:\n{p.read_text()[-1500:]}" for p in sorted(logs.iterdir()))
        assert code == 0, said
        assert codes == [0] * nodes, said
    result = json.loads(summary.read_text())
    assert result["reached"], result
    assert "CurveZMQ, 3 node keys allowed" in (logs / "coordinator.log").read_text()
    for k in range(nodes):
        assert f"claimed key(s) node-{k}" in (logs / f"node-{k}.log").read_text()
