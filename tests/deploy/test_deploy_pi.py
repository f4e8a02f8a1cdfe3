"""deploy/raspberry-pi/install.sh for real, in a Debian bookworm container standing in for a Pi.

The script installs the three roles (broker, coordinator, node) as root, with the Debian
packages already in the image (--no-apt), no systemd in a container (--no-systemctl) and the
host-built wheelhouse (no PyPI from inside). Then the units' commands run with the env files
the script wrote: mosquitto with the generated password file and ACL, the coordinator, and
three nodes; the run must reach eps. This checks the script, the env files and the broker
configuration together; `test_deploy_files` verifies the unit files with systemd-analyze.
"""

from __future__ import annotations

from typing import Any

import pytest
from deploy_helpers import BASE_IMAGE, ROOT

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

SCRIPT = r"""
set -eu
mkdir -p /tmp/src
cd /src
cp -r pyproject.toml README.md gossip node coordinator cli deploy /tmp/src/
install=/tmp/src/deploy/raspberry-pi/install.sh
pip="--no-index --find-links /wheels"
$install broker --no-apt --no-systemctl --mqtt-password 'pi s3cret'
$install coordinator --no-apt --no-systemctl --pip-flags "$pip" --graph cycle:3 --rate 100 \
  --broker 127.0.0.1 --mqtt-password 'pi s3cret' --dashboard-port 8080
$install node --no-apt --no-systemctl --pip-flags "$pip" --coordinator 127.0.0.1 --name pi-1
echo '--- files'
ls /etc/systemd/system/ /etc/gossip/ /etc/gossip/mosquitto/
stat -c '%n %U %a' /etc/gossip/mosquitto/passwd /etc/gossip/node.env
echo '--- node.env'; cat /etc/gossip/node.env
echo '--- coordinator.env'; grep -v PASSWORD /etc/gossip/coordinator.env | grep -v BROKER
echo '--- run'
# What the units run: ExecStart with EnvironmentFile, as User=gossip (mosquitto as its user).
runuser -u mosquitto -- mosquitto -c /etc/gossip/mosquitto/mosquitto.conf -d
sleep 1
if mosquitto_sub -h 127.0.0.1 -t 'gossip/#' -C 1 -W 2 2>/tmp/anon; then
  echo "anonymous client accepted"; exit 1
fi
set -a; . /etc/gossip/coordinator.env; set +a
runuser -u gossip -- /opt/gossip/bin/gossip coordinator --json /tmp/summary.json \
  >/tmp/coordinator.log 2>&1 &
coordinator=$!
for i in 1 2 3; do
  (set -a; . /etc/gossip/node.env; set +a
   GOSSIP_NAME=pi-$i GOSSIP_BIND=tcp://0.0.0.0:$((7000 + i)) \
     runuser -u gossip -- /opt/gossip/bin/gossip node >/tmp/node-$i.log 2>&1) &
done
if ! wait $coordinator; then cat /tmp/coordinator.log /tmp/node-*.log; exit 1; fi
wait
echo '--- summary'; cat /tmp/summary.json
"""


def test_install_script_sets_up_a_working_pi_cluster(docker_client: Any, gossip_image: str) -> None:
    # gossip_image has built the wheelhouse this container installs from.
    output = docker_client.containers.run(
        BASE_IMAGE,
        ["bash", "-c", SCRIPT],
        volumes={
            str(ROOT): {"bind": "/src", "mode": "ro"},
            str(ROOT / ".wheelhouse"): {"bind": "/wheels", "mode": "ro"},
        },
        remove=True,
        stdout=True,
        stderr=True,
    ).decode()
    files, _, rest = output.partition("--- node.env")
    for unit in ("gossip-node.service", "gossip-coordinator.service", "gossip-mosquitto.service"):
        assert unit in files
    # The password file belongs to mosquitto and nobody else may read it; the env files are
    # readable by the gossip group only.
    assert "/etc/gossip/mosquitto/passwd mosquitto 600" in files
    assert "/etc/gossip/node.env root 640" in files
    assert "GOSSIP_COORDINATOR=tcp://127.0.0.1:5555" in rest
    assert "GOSSIP_NAME=pi-1" in rest
    assert "GOSSIP_BIND=tcp://0.0.0.0:7000" in rest
    assert "GOSSIP_ADVERTISE=" in rest
    assert "GOSSIP_GRAPH=cycle:3" in rest
    summary = rest.partition("--- summary")[2]
    assert '"reached": true' in summary, output[-3000:]
