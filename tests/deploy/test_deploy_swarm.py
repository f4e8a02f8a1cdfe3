"""docker-compose.yml as a stack file: `docker stack deploy` on a single-node Swarm.

The same file that Compose runs must deploy on a Swarm (overlay network, replicas, the
dashboard published through the routing mesh) and run to eps. One host only: the overlay
network spans nothing here, but the file, the templates and the service wiring are the ones a
multi-host Swarm uses.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from deploy_helpers import BASE_IMAGE, FIGURES, ROOT, free_port, get_json, poll, run

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

N = 4


@pytest.fixture
def swarm(docker_client: Any) -> Iterator[None]:
    """A single-node Swarm on this engine: initialised here (and left after) if need be."""
    state = docker_client.info()["Swarm"]["LocalNodeState"]
    joined_here = False
    if state != "active":
        init = subprocess.run(
            ["docker", "swarm", "init", "--advertise-addr", "127.0.0.1"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if init.returncode != 0:
            pytest.fail(f"this engine cannot start a Swarm: {init.stderr.strip()}")
        joined_here = True
    try:
        yield
    finally:
        if joined_here:
            run(["docker", "swarm", "leave", "--force"], timeout=120)


def test_the_compose_file_deploys_as_a_stack_and_reaches_eps(
    docker_client: Any, gossip_image: str, swarm: None
) -> None:
    stack = f"gossipstack{os.getpid()}"
    port = free_port()
    env = {
        **os.environ,
        "GOSSIP_IMAGE": gossip_image,
        "GOSSIP_MOSQUITTO_IMAGE": BASE_IMAGE,
        "GOSSIP_GRAPH": f"cycle:{N}",
        "GOSSIP_NODES": str(N),
        # The compose default: on a small ring every node is in every other exchange, and
        # overlay round trips are slower than loopback (deploy/README.md, on rates).
        "GOSSIP_RATE": "200",
        "GOSSIP_DASHBOARD_PUBLISH": str(port),
    }
    run(
        [
            "docker",
            "stack",
            "deploy",
            "--resolve-image",
            "never",
            "-c",
            str(ROOT / "docker-compose.yml"),
            stack,
        ],
        env=env,
    )
    try:
        node_service = docker_client.services.get(f"{stack}_node")
        assert node_service.attrs["Spec"]["Mode"]["Replicated"]["Replicas"] == N
        network = docker_client.networks.get(f"{stack}_gossip")
        assert network.attrs["Driver"] == "overlay"

        def final() -> Any:
            state = get_json(f"http://127.0.0.1:{port}/api/state")
            return state if state.get("final") is not None else None

        state = poll("the stack's run to end", final, timeout=420, every=1.0)
        assert state["summary"]["reached"], state["summary"]
        assert state["final"]["complete"]
        assert state["final"]["mass_drift_rel"] < 1e-9
        # Swarm names the nodes by task slot (deploy/entrypoint.sh): node-1 ... node-N.
        # Secure by default: each task claimed a key of the pool, and is named after it.
        assert sorted(state["registered"]) == [f"node-{i}" for i in range(N)]
    finally:
        remove_stack(docker_client, stack)


def remove_stack(client: Any, stack: str, timeout: float = 300, force_after: float = 90) -> None:
    """``docker stack rm`` until the stack's containers and network are gone.

    Swarm removes task containers and overlay networks lazily, and on a loaded machine a single
    ``stack rm`` has left its network behind ("active endpoints") for good. So ``stack rm`` is
    repeated, as a user would, and after ``force_after`` seconds what is left is removed by hand;
    the figures record how long it took and whether that was needed.
    """
    label = {"label": f"com.docker.stack.namespace={stack}"}
    started = time.monotonic()
    forced = False
    said = ""
    while True:
        rm = subprocess.run(
            ["docker", "stack", "rm", stack], capture_output=True, text=True, timeout=120
        )
        said = (rm.stdout + rm.stderr).strip()[-600:]
        # Swarm removes containers while we list them: a vanished one is simply gone.
        containers = client.containers.list(all=True, filters=label, ignore_removed=True)
        networks = client.networks.list(filters=label)
        if not containers and not networks:
            break
        waited = time.monotonic() - started
        if waited > timeout:
            left = [f"container {c.name} ({c.status})" for c in containers]
            left += [f"network {n.name}" for n in networks]
            raise AssertionError(
                f"{waited:.0f} s after `docker stack rm {stack}` these are left: {left}; "
                f"the last `stack rm` said: {said!r}"
            )
        if waited > force_after:
            forced = True
            for container in containers:
                subprocess.run(["docker", "rm", "-f", container.id], capture_output=True)
            for network in networks:
                subprocess.run(["docker", "network", "rm", network.id], capture_output=True)
        time.sleep(2.0)
    # `stack rm` leaves named volumes (the keys): remove them as a user would.
    for volume in client.volumes.list(filters=label):
        subprocess.run(["docker", "volume", "rm", "-f", volume.id], capture_output=True)
    FIGURES["swarm_teardown_s"] = round(time.monotonic() - started, 1)
    FIGURES["swarm_teardown_forced"] = forced
    # The engine's own bookkeeping of the removed network lags its listing a little.
    time.sleep(1.0)
