"""deploy/raspberry-pi/install.sh for real, secure, in a Debian container standing in for the Pis.

The container is the Debian base of ``scripts/docker-image`` (python3-venv, mosquitto), with its
wheelhouse (no PyPI from inside), and the
keys of ``gossip keys init`` and the project's wheel, both made on the host, as the playbook
makes them on its controller (the wheel is pure Python: nothing is built under emulation; the
checkout as ``--source``, install.sh's default, is tested natively below). install.sh installs
the broker (``--keys DIR/mqtt``), the coordinator (``--keys DIR/coordinator``) and three nodes
(``--keys DIR/node-K``, each with its own ``--etc``, as on three Pis), with the Debian packages
already there (--no-apt) and no systemd (--no-systemctl).
Twice: on the Pis' own platform, arm64 under qemu (about 3 minutes: every pip install and
every Python start is emulated; marked ``emulated``, so run by ``bash scripts/test -m emulated``
rather than in the whole suite, where test_deploy_arm64 stands for arm64), and on the machine's
own (under half a minute).
Then the units' commands run with the env files the script wrote, as the units' users: an
anonymous MQTT client must be refused, and the run must reach eps over CurveZMQ, its metrics
going through the nodes' own MQTT accounts. `test_deploy_pi_files` checks the playbook and the
refusals without Docker; `test_deploy_files` verifies the unit files with systemd-analyze.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import ARM64_BASE, BASE_IMAGE, FIGURES, ROOT

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(2400)]

NODES = 3

SCRIPT = r"""
set -eu
# Phase marks (seconds since the epoch): the test reports how long each phase took.
mark() { echo "mark $1 $(date +%s.%N)"; }
mark start
echo "machine: $(uname -m)"
# As the playbook does: the wheel built on the controller (pure Python: the same for arm64),
# installed with --source; nothing is built under emulation. The checkout stays read-only.
install=/src/deploy/raspberry-pi/install.sh
# --no-compile: pip's bytecode of every dependency (thousands of files, each compiled under
# emulation) is no check; the roles compile what they import.
pip="--no-index --find-links /wheels --no-compile"
$install broker --no-apt --no-systemctl --keys /keys/mqtt
$install coordinator --no-apt --no-systemctl --source "$WHEEL" --pip-flags "$pip" \
  --graph cycle:3 --rate 50 --until 1e-3 --broker 127.0.0.1 --keys /keys/coordinator \
  --dashboard-port 8080
mark coordinator_installed
# Three Pis: node-0 on the coordinator's (the default /etc/gossip), node-1 and node-2 each with
# an /etc of its own.
$install node --no-apt --no-systemctl --source "$WHEEL" --pip-flags "$pip" \
  --coordinator 127.0.0.1 --keys /keys/node-0 --port 7000
for k in 1 2; do
  $install node --no-apt --no-systemctl --source "$WHEEL" --pip-flags "$pip" \
    --coordinator 127.0.0.1 --keys /keys/node-$k --port $((7000 + k)) --etc /etc/gossip-$k \
    --no-chrony >/dev/null
done
mark nodes_installed
echo '--- files'
ls /etc/systemd/system/ /etc/gossip/ /etc/gossip/mosquitto/ /etc/gossip/keys/
stat -c '%n %U %a' /etc/gossip/mosquitto/passwd /etc/gossip/mosquitto/acl /etc/gossip/node.env \
  /etc/gossip/keys/node /etc/gossip/keys/node/secret.key /etc/gossip/keys/coordinator \
  /etc/gossip/keys/coordinator/secret.key /etc/gossip/keys/coordinator/mqtt.secret
cut -d: -f1 /etc/gossip/mosquitto/passwd | sed 's/^/account /'
grep -h '"name"' /etc/gossip/keys/node/identity.json /etc/gossip-2/keys/node/identity.json
echo '--- node.env'; cat /etc/gossip/node.env
echo '--- coordinator.env'; cat /etc/gossip/coordinator.env
echo '--- run'
mark run
# What the units run: ExecStart with EnvironmentFile, as User=gossip (mosquitto as its user).
runuser -u mosquitto -- mosquitto -c /etc/gossip/mosquitto/mosquitto.conf -d
# Wait until the broker answers; it must refuse an anonymous client ("not authorised").
for _ in $(seq 100); do
  if mosquitto_sub -h 127.0.0.1 -t 'gossip/#' -C 1 -W 3 >/dev/null 2>/tmp/anon; then
    echo "anonymous client accepted"; exit 1
  fi
  grep -qi 'not authori' /tmp/anon && break
  sleep 0.5
done
echo "anonymous: $(cat /tmp/anon)"
set -a; . /etc/gossip/coordinator.env; set +a
runuser -u gossip -- /opt/gossip/bin/gossip coordinator --json /tmp/summary.json \
  --timeout 900 >/tmp/coordinator.log 2>&1 &
coordinator=$!
for k in 0 1 2; do
  etc=/etc/gossip; [ $k -gt 0 ] && etc=/etc/gossip-$k
  (set -a; . $etc/node.env; set +a
   runuser -u gossip -- /opt/gossip/bin/gossip node >/tmp/node-$k.log 2>&1) &
done
if ! wait $coordinator; then tail -n 40 /tmp/coordinator.log /tmp/node-*.log; exit 1; fi
wait
mark run_ended
echo '--- coordinator log'; grep -m 1 'registration on' /tmp/coordinator.log || true
echo '--- insecure broker'
# Only when asked: --insecure gives an anonymous broker (and says so).
$install broker --no-apt --no-systemctl --insecure --etc /tmp/insecure 2>&1 | grep -i warning
grep -E '^(allow_anonymous|password_file|acl_file)' /tmp/insecure/mosquitto/mosquitto.conf
echo '--- summary'; cat /tmp/summary.json
"""

# install.sh's default --source, the checkout it sits in, on the amd64 base (native: building the
# project is seconds here, minutes under qemu). A copy, because pip builds in the source tree.
# A second role from the same checkout finds it installed.
CHECKOUT = r"""
set -eu
mkdir -p /tmp/src
cd /src
cp -r pyproject.toml README.md continuized gossip node coordinator cli deploy /tmp/src/
install=/tmp/src/deploy/raspberry-pi/install.sh
flags="--no-apt --no-systemctl --no-chrony --coordinator 127.0.0.1 --keys /keys/node-0"
# --no-compile: the bytecode of the dependencies is not what this checks.
$install node $flags --pip-flags "--no-index --find-links /wheels --no-compile"
$install node $flags --etc /etc/gossip-again
echo '--- installed from'
cat /opt/gossip/lib/python3*/site-packages/continuized_gossip-*.dist-info/direct_url.json
"""


@pytest.fixture
def cluster_keys(tmp_path: Path) -> Path:
    """The keys of a 3-node cluster, made on the host as the playbook's controller makes them."""
    keys = tmp_path / "keys"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "continuized.cli.app",
            "keys",
            "init",
            "--dir",
            str(keys),
            "--nodes",
            "3",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return keys


def _phases(output: str) -> dict[str, float]:
    """Seconds between the script's consecutive ``mark NAME EPOCH`` lines, by the later name."""
    marks = [line.split() for line in output.splitlines() if line.startswith("mark ")]
    return {
        name: round(float(at) - float(before), 1)
        for (_, _, before), (_, name, at) in itertools.pairwise(marks)
    }


# The Pis' platform, and what stands in for it: (base image, wheelhouse, fixture that makes
# both, what `uname -m` says inside).
PLATFORMS = {
    "native": (BASE_IMAGE, ".wheelhouse", "gossip_image", os.uname().machine),
    "arm64": (ARM64_BASE, ".wheelhouse-arm64", "arm64_image", "aarch64"),
}


@pytest.mark.parametrize("platform", ["native", pytest.param("arm64", marks=pytest.mark.emulated)])
def test_secure_install_refuses_anonymous_mqtt_and_reaches_eps(
    platform: str,
    request: pytest.FixtureRequest,
    docker_client: Any,
    project_wheel: Path,
    cluster_keys: Path,
) -> None:
    base, wheelhouse, fixture, machine = PLATFORMS[platform]
    # The fixture has bootstrapped the base and filled the wheelhouse.
    request.getfixturevalue(fixture)
    started = time.monotonic()
    container = docker_client.containers.run(
        base,
        ["bash", "-c", SCRIPT],
        environment={"WHEEL": f"/dist/{project_wheel.name}"},
        volumes={
            str(ROOT): {"bind": "/src", "mode": "ro"},
            str(ROOT / wheelhouse): {"bind": "/wheels", "mode": "ro"},
            str(project_wheel.parent): {"bind": "/dist", "mode": "ro"},
            str(cluster_keys): {"bind": "/keys", "mode": "ro"},
        },
        detach=True,
    )
    try:
        status = container.wait(timeout=2000)["StatusCode"]
        output = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    FIGURES[f"pi_secure_install_and_run_{platform}_s"] = round(time.monotonic() - started, 1)
    FIGURES[f"pi_secure_install_phases_{platform}_s"] = _phases(output)
    assert status == 0, output[-4000:]
    assert f"machine: {machine}" in output

    files, _, rest = output.partition("--- node.env")
    for unit in (
        "gossip-node.service",
        "gossip-coordinator.service",
        "gossip-mosquitto.service",
    ):
        assert unit in files
    # The broker's accounts and ACL are the keys' (coordinator, node-0 .. node-2, and the
    # operator who may submit runs to a standing coordinator), readable by
    # mosquitto alone; each role's keys belong to the service user, 0700, secrets 0600.
    assert "/etc/gossip/mosquitto/passwd mosquitto 600" in files
    assert "/etc/gossip/mosquitto/acl mosquitto 600" in files
    assert "/etc/gossip/node.env root 640" in files
    assert "/etc/gossip/keys/node gossip 700" in files
    assert "/etc/gossip/keys/node/secret.key gossip 600" in files
    assert "/etc/gossip/keys/coordinator gossip 700" in files
    assert "/etc/gossip/keys/coordinator/mqtt.secret gossip 600" in files
    accounts = {line.split()[1] for line in files.splitlines() if line.startswith("account ")}
    assert accounts == {"coordinator", "node-0", "node-1", "node-2", "operator"}
    # Each Pi holds only its own node key.
    assert '"name": "node-0"' in files
    assert '"name": "node-2"' in files
    assert "node-1" not in files.partition("/etc/gossip/keys/:")[2].partition("\n\n")[0]

    # The coordinator's install took the host-built wheel; pi-0's node reuses the environment
    # that install made from the same source.
    assert f"installing continuized-gossip from /dist/{project_wheel.name}" in files
    assert "already in /opt/gossip" in files, files[-2000:]

    node_env, _, rest = rest.partition("--- coordinator.env")
    assert "GOSSIP_KEYS=/etc/gossip/keys/node" in node_env
    assert "GOSSIP_NAME" not in node_env  # named after its key
    assert "GOSSIP_COORDINATOR=tcp://127.0.0.1:5555" in node_env
    coordinator_env, _, rest = rest.partition("--- run")
    assert "GOSSIP_KEYS=/etc/gossip/keys/coordinator" in coordinator_env
    # No password in the file: the coordinator derives its own from the MQTT secret.
    assert "GOSSIP_BROKER=mqtt://127.0.0.1:1883" in coordinator_env

    run_out, _, rest = rest.partition("--- coordinator log")
    assert "anonymous client accepted" not in run_out
    assert "not authori" in run_out.partition("anonymous: ")[2].lower(), run_out[-2000:]
    log, _, rest = rest.partition("--- insecure broker")
    assert f"CurveZMQ, {NODES} node keys allowed" in log, log
    insecure, _, summary_text = rest.partition("--- summary")
    assert "WARNING: --insecure" in insecure
    assert "allow_anonymous true" in insecure
    assert "password_file" not in insecure

    summary = json.loads(summary_text)
    assert summary["reached"] is True, output[-3000:]


def test_install_from_the_checkout_builds_and_installs_it(
    docker_client: Any, gossip_image: str, cluster_keys: Path
) -> None:
    # gossip_image has bootstrapped BASE_IMAGE and built the amd64 wheelhouse (with the build
    # backend, for pip's isolated build of the checkout).
    started = time.monotonic()
    container = docker_client.containers.run(
        BASE_IMAGE,
        ["bash", "-c", CHECKOUT],
        volumes={
            str(ROOT): {"bind": "/src", "mode": "ro"},
            str(ROOT / ".wheelhouse"): {"bind": "/wheels", "mode": "ro"},
            str(cluster_keys): {"bind": "/keys", "mode": "ro"},
        },
        detach=True,
    )
    try:
        status = container.wait(timeout=600)["StatusCode"]
        output = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    FIGURES["pi_install_from_checkout_amd64_s"] = round(time.monotonic() - started, 1)
    assert status == 0, output[-4000:]
    first, _, installed = output.partition("--- installed from")
    assert "installing continuized-gossip from /tmp/src" in first, first[-3000:]
    # install.sh loaded the key with the installed package, as the service user.
    assert "keys of node-0 in /etc/gossip/keys/node" in first, first[-3000:]
    # The same checkout again (a second role on this Pi): found by its fingerprint, not rebuilt.
    assert "continuized-gossip from /tmp/src is already in /opt/gossip" in first, first[-3000:]
    assert json.loads(installed)["url"] == "file:///tmp/src", installed
