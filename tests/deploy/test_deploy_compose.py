"""docker-compose.yml for real: an 8-node cluster in containers, with a node killed mid-run.

What a user of ``docker compose up --scale node=8`` gets is checked end to end: the broker
refuses anonymous clients, the coordinator's dashboard answers on the published port, the nodes
find the coordinator by its service name and each other by the addresses they advertise, the
run reaches eps and ends at the exact average with the mass conserved, and ``down`` leaves
nothing behind (the fixture checks that).
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import pytest
from deploy_helpers import FIGURES, ROOT, ComposeProject, get_json, poll, run

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1200)]

N = 8
GRAPH = "cycle:8"
EPS = 1e-6


def _dashboard(project: ComposeProject) -> str:
    return "http://127.0.0.1:" + project.env["GOSSIP_DASHBOARD_PUBLISH"]


def _configure(project: ComposeProject, rate: float | None = None) -> None:
    """Set the run's environment; ``rate=None`` keeps the compose file's default."""
    project.env.update(
        {
            "GOSSIP_GRAPH": GRAPH,
            "GOSSIP_NODES": str(N),
            "GOSSIP_UNTIL": f"{EPS:g}",
            "GOSSIP_MQTT_PASSWORD": "s3cret-for-the-test",
        }
    )
    if rate is not None:
        project.env["GOSSIP_RATE"] = f"{rate:g}"


def _final(project: ComposeProject, timeout: float) -> dict[str, Any]:
    """Wait for the run's exact final result on the dashboard; return the snapshot."""

    def done() -> dict[str, Any] | None:
        snap: dict[str, Any] = get_json(_dashboard(project) + "/api/state")
        return snap if snap.get("final") is not None else None

    result: dict[str, Any] = poll("the run's final result", done, timeout, every=0.5)
    return result


def _check_exact_average(snap: dict[str, Any]) -> None:
    summary, final = snap["summary"], snap["final"]
    assert summary["reached"], summary
    assert final["complete"], "a node sent no final report"
    # The stop comes a moment after the estimate crossed eps, and ARG's error is not monotone:
    # the exact final error is eps up to a small factor (seen: 1.005e-6 for eps = 1e-6).
    assert final["error"] <= 10 * EPS, final
    # The average itself is exact: no mass was created or lost, whatever the kills and retries.
    assert final["mass_drift_rel"] < 1e-9, final
    # onehot: the average is 1/N, and every node's x is within sqrt(2 * error) of it.
    assert final["mean"] == [pytest.approx(1.0 / N)]
    for value in final["values"]:
        assert abs(value[0] - 1.0 / N) <= math.sqrt(2 * final["error"]) + 1e-12


def test_compose_config_validates(compose_project: ComposeProject) -> None:
    done = compose_project.compose("config")
    for service in ("mosquitto", "coordinator", "node"):
        assert f"{service}:" in done.stdout
    services = compose_project.compose("config", "--services").stdout.split()
    assert set(services) == {"mosquitto", "coordinator", "node"}
    # The monitoring file adds Prometheus and Grafana, mounting the dashboard's configuration.
    monitoring = str(ROOT / "deploy" / "compose.monitoring.yml")
    both = compose_project.compose("-f", monitoring, "config").stdout
    for mounted in ("deploy/prometheus/prometheus.yml", "deploy/grafana/provisioning"):
        assert mounted in both
        assert (ROOT / mounted).exists()
    # Both are also valid stack files: what `docker stack deploy` would run.
    stack = run(["docker", "stack", "config", "-c", str(ROOT / "docker-compose.yml")])
    assert "endpoint_mode: dnsrr" in stack.stdout
    run(["docker", "stack", "config", "-c", str(ROOT / "docker-compose.yml"), "-c", monitoring])


def test_cold_start_and_time_to_eps_at_the_default_rate(compose_project: ComposeProject) -> None:
    _configure(compose_project)  # the default rate, what `docker compose up` runs
    started = time.monotonic()
    compose_project.compose("up", "--detach", "--no-build", "--scale", f"node={N}")

    def activity() -> bool:
        snap = get_json(_dashboard(compose_project) + "/api/state")
        return bool(snap["activations"] > 0)

    poll("the first activation", activity, timeout=180, every=0.1)
    FIGURES["compose_up_to_first_activation_s"] = round(time.monotonic() - started, 2)
    snap = _final(compose_project, timeout=180)
    _check_exact_average(snap)
    last = snap["runs"][-1]
    FIGURES["8_node_ring_default_rate"] = {
        "rate": snap["rate"],
        "t_eps": round(last["t_eps"], 1),
        "wall_s_to_eps": round(last["wall_s"], 3),
        "rate_achieved": round(last["rate_achieved"], 1),
        "final_error": last["final_error"],
    }
    # Every node exited 0 after the stop; the coordinator holds the dashboard up.
    for node in compose_project.containers("node"):
        assert node.wait(timeout=60)["StatusCode"] == 0, node.logs(tail=30).decode()
    (coordinator,) = compose_project.containers("coordinator")
    coordinator.reload()
    assert coordinator.status == "running"


def test_eight_nodes_survive_a_killed_node_and_end_at_the_exact_average(
    compose_project: ComposeProject,
) -> None:
    # A slow rate makes the run last long enough (t_eps ~ 400 on the ring: ~20 s) to kill a
    # node in the middle of it.
    _configure(compose_project, rate=20)
    compose_project.compose("up", "--detach", "--no-build", "--scale", f"node={N}")
    compose_project.wait_healthy("mosquitto", timeout=120)
    compose_project.wait_healthy("coordinator", timeout=180)
    base = _dashboard(compose_project)

    # The dashboard answers: the page, the summary of contract C4, Prometheus metrics.
    page = poll("the dashboard page", lambda: _get_text(base + "/"), timeout=30)
    assert "<html" in page.lower()
    summary = get_json(base + "/api/summary")
    assert summary["expected"] == N
    assert summary["graph"] == GRAPH
    assert summary["algorithm"] == "arg"
    assert "gossip" in _get_text(base + "/metrics")

    # The broker refuses anonymous clients and serves the cluster's account.
    (broker,) = compose_project.containers("mosquitto")
    anonymous = broker.exec_run(
        ["mosquitto_sub", "-h", "127.0.0.1", "-t", "gossip/#", "-C", "1", "-W", "3"]
    )
    assert anonymous.exit_code != 0
    assert b"not authori" in anonymous.output.lower()

    # All registered and running: kill one node's container in the middle of the run.
    poll(
        "the run to be under way",
        lambda: get_json(base + "/api/summary")["t"] > 60,
        timeout=240,
    )
    victim = compose_project.containers("node")[3]
    victim.kill()
    victim.reload()
    assert victim.status == "exited"
    time.sleep(2.0)
    before = get_json(base + "/api/summary")
    assert not before["reached"], "the run ended before the node was killed; slow it down"
    victim.start()

    snap = _final(compose_project, timeout=300)
    _check_exact_average(snap)
    # The restarted node took its old id back: still N distinct registered names.
    assert len(snap["registered"]) == N
    status = broker.exec_run(
        [
            "mosquitto_sub",
            "-h",
            "127.0.0.1",
            "-u",
            "gossip",
            "-P",
            "s3cret-for-the-test",
            "-t",
            "gossip/gossip/coordinator/status",
            "-C",
            "1",
            "-W",
            "5",
        ]
    )
    assert status.exit_code == 0, status.output
    assert "***" in json.loads(status.output)["broker"], "the status must not carry the password"


def _get_text(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=3) as response:
        return str(response.read().decode())
