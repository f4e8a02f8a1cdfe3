"""The image for the Raspberry Pi (linux/arm64), cross-built and run on this host under qemu.

``scripts/docker-image --platform linux/arm64`` registers qemu-user-static with binfmt_misc,
bootstraps an arm64 Debian base, fetches the aarch64 wheels and builds deploy/Dockerfile for
arm64, installing the session's project wheel (built natively: it is pure Python, and the Pi
test installs the same one). The image must say it is arm64, its container must run aarch64
code (``uname -m``), and a real run must reach eps in it: a mosquitto broker, the coordinator
and three nodes, all arm64 processes emulated by qemu, talking over loopback inside one
container. This is emulation, not
Pi hardware: it proves the image's binaries and wheels are the right ones and work together,
not the Pi's speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest
from deploy_helpers import FIGURES, ROOT, run

EPS = 1e-3

# One container: the broker the base image ships, then the roles as the unit files run them.
RUN = rf"""
set -eu
echo "machine: $(uname -m)"
/opt/gossip/bin/python -c 'import platform, numpy, zmq; print("python:", platform.machine())'
gossip graph info cycle:8
mosquitto -p 1883 -d
for i in $(seq 50); do mosquitto_pub -h 127.0.0.1 -t probe -m up 2>/dev/null && break; sleep 0.2
done
gossip coordinator --graph cycle:3 --rate 50 --values onehot --until {EPS:g} \
  --broker mqtt://127.0.0.1:1883 --bind tcp://127.0.0.1:5555 --json /tmp/summary.json \
  --timeout 300 >/tmp/coordinator.log 2>&1 &
coordinator=$!
nodes=""
for i in 1 2 3; do
  gossip node --coordinator tcp://127.0.0.1:5555 --name arm-$i --host 127.0.0.1 \
    >/tmp/node-$i.log 2>&1 &
  nodes="$nodes $!"
done
if ! wait $coordinator; then tail -n 30 /tmp/coordinator.log /tmp/node-*.log; exit 1; fi
# The coordinator stops the nodes over MQTT; a node still running a minute later is reported
# (and killed, so that the container ends, and the test fails) rather than waited for forever.
for pid in $nodes; do
  for _ in $(seq 120); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  if kill -0 $pid 2>/dev/null; then echo "node pid $pid: still running"; kill -9 $pid; fi
done
echo '--- logs'
tail -n 3 /tmp/node-*.log
echo '--- summary'
cat /tmp/summary.json
"""


def _row(table: str, name: str) -> str:
    """The value of row ``name`` of a ``gossip graph info`` table."""
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if cells[0] == name:
            return cells[1]
    raise AssertionError(f"no row {name!r} in:\n{table}")


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_arm64_image_runs_a_gossip_cluster_under_emulation(
    docker_client: Any, arm64_image: str
) -> None:
    image = docker_client.images.get(arm64_image)
    assert image.attrs["Architecture"] == "arm64", image.attrs["Architecture"]
    assert image.attrs["Os"] == "linux"

    started = time.monotonic()
    container = docker_client.containers.run(
        arm64_image, ["-c", RUN], entrypoint=["bash"], detach=True
    )
    try:
        status = container.wait(timeout=600)["StatusCode"]
        output = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    FIGURES["arm64_run_s"] = round(time.monotonic() - started, 1)
    assert status == 0, output[-4000:]

    # The kernel runs aarch64 code in the container (qemu through binfmt_misc), and so does the
    # image's Python with its compiled wheels.
    assert "machine: aarch64" in output, output[-3000:]
    assert "python: aarch64" in output, output[-3000:]
    # The graph quantities come from numpy's aarch64 build: the same as this host's.
    host = run([sys.executable, "-m", "continuized.cli.app", "graph", "info", "cycle:8"]).stdout
    assert _row(output, "mu_gossip") == _row(host, "mu_gossip")
    assert _row(output, "theta_arg") == _row(host, "theta_arg")
    summary = json.loads(output.partition("--- summary")[2])
    assert summary["reached"] is True, output[-3000:]
    # Every node stops after the run: on the coordinator's stop command, or, had it missed them
    # all, on the retained status that says the run is over.
    stuck = output.count(": still running")
    FIGURES["arm64_nodes_not_stopped"] = stuck
    assert stuck == 0, f"{stuck} arm64 node(s) did not exit after the stop:\n{output[-3000:]}"


@pytest.mark.parametrize(
    ("argv", "bad"),
    [
        (["scripts/docker-image", "--platform", "linux/s390x"], "'linux/s390x'"),
        (["scripts/qemu-binfmt", "riscv64"], "'riscv64'"),
    ],
)
def test_scripts_refuse_an_unknown_platform(argv: list[str], bad: str) -> None:
    # Both check their arguments before touching Docker, apt or binfmt_misc.
    done = subprocess.run(["bash", *argv], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert bad in done.stderr
    # ... and name the valid ones.
    assert "arm64" in done.stderr
    assert "amd64" in done.stderr
