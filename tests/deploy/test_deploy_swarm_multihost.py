"""docker-compose.yml on a three-host Swarm: replicas spread, an overlay across hosts, a host lost.

Three Docker daemons, each in a network namespace of its own with its own address on one
bridge (tests/deploy/swarm_hosts.py), form a Swarm: one manager, two workers. The image is
built on the manager and loaded into the workers (no registry). The compose file deploys as a
stack with a small override (tests/deploy/swarm-multihost.yml): the node replicas spread over
the hosts (a placement preference on a host label, at most two per host) and the coordinator
stays on the manager. The key pool is one directory that all three hosts bind-mount, as a
shared (NFS) directory would be on a LAN.

One deployment, one run (a stack deploy is most of the cost, so the two checks share it):

1. While the run goes on, the node tasks run on all three hosts, two each (``docker service
   ps``), the overlay network's peers are the three host addresses, and some exchange has been
   applied between the nodes of every pair of hosts.
2. Then, with ``--dead-after``, one worker's link is cut. Its two nodes fall silent; Swarm
   cannot move them (the survivors already hold two replicas each), so the coordinator declares
   them dead and the four survivors reach eps, exact, on the mean of *their* initial values,
   which is what the membership rule promises.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import (
    BASE_IMAGE,
    BASE_RECIPE,
    FIGURES,
    IMAGE,
    ROOT,
    get_json,
    poll,
    unavailable,
)
from swarm_hosts import Host, SwarmHosts

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

N = 6  # complete:6: two nodes per host, and any host's loss leaves a connected graph
PER_HOST = 2
OVERRIDE = ROOT / "tests" / "deploy" / "swarm-multihost.yml"


@pytest.fixture(scope="module")
def hosts() -> Iterator[SwarmHosts]:
    """Three Docker hosts in one Swarm, the image loaded into each; all removed afterwards."""
    if os.geteuid() != 0:
        unavailable("three Docker hosts need root (network namespaces and dockerd)")
    for tool in ("docker", "dockerd", "nsenter", "unshare", "ip", "iptables"):
        if shutil.which(tool) is None:
            unavailable(f"no {tool} here (scripts/system-deps installs what is missing)")
    tag = os.getpid() % 10000
    swarm = SwarmHosts(
        bridge=f"gsw{tag}",
        gateway=f"192.168.{200 + tag % 50}.1",
        root=Path(f"/tmp/gossip-swarm-{os.getpid()}"),
    )
    try:
        started = time.monotonic()
        try:
            swarm.create()
        except AssertionError as exc:
            logs = "\n".join(f"--- {h.name}\n{h.log_tail()}" for h in swarm.hosts)
            pytest.fail(f"three Docker daemons could not start here: {exc}\n{logs}")
        swarm.form_swarm()
        FIGURES["swarm3_hosts_up_s"] = round(time.monotonic() - started, 1)
        started = time.monotonic()
        load_image(swarm)
        FIGURES["swarm3_image_s"] = round(time.monotonic() - started, 1)
        yield swarm
    finally:
        swarm.close()


def load_image(swarm: SwarmHosts) -> None:
    """Build the image once and load it into the three hosts (no registry).

    With the machine's own engine running, the image is built there, where the other
    deployment tests have already built its layers (a cache hit: seconds, where a build on a
    fresh daemon takes minutes), saved once, and loaded into the three hosts side by side.
    Without it, the image is built on the manager, its base taken from the copy the last run
    saved in .docker-cache/ (or bootstrapped and saved there), and loaded into the workers.
    """
    manager = swarm.manager
    own_engine = subprocess.run(["docker", "info"], capture_output=True, timeout=60)
    if own_engine.returncode == 0:
        build_image(os.environ)
        archive = swarm.root / "image.tar"
        # The base too: the broker's service runs it (GOSSIP_MOSQUITTO_IMAGE).
        subprocess.run(
            ["docker", "save", "-o", str(archive), IMAGE, BASE_IMAGE], check=True, timeout=600
        )
        loads = [
            subprocess.Popen(
                ["docker", "-H", host.socket, "load", "-q", "-i", str(archive)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for host in swarm.hosts
        ]
        for host, load in zip(swarm.hosts, loads, strict=True):
            _, err = load.communicate(timeout=600)
            assert load.returncode == 0, f"{host.name}: docker load failed: {err!r}"
        archive.unlink()
        return
    cached = ROOT / ".docker-cache" / f"gossip-base-bookworm-{BASE_RECIPE}.tar"
    if cached.exists():
        manager.docker("load", "-i", str(cached), timeout=600)
    build_image({**os.environ, "DOCKER_HOST": manager.socket})
    if not cached.exists():
        cached.parent.mkdir(exist_ok=True)
        for stale in cached.parent.glob("gossip-base-bookworm*.tar"):  # an older recipe's
            stale.unlink()
        manager.docker("save", "-o", str(cached), BASE_IMAGE, timeout=600)
    for worker in swarm.hosts[1:]:
        save = subprocess.Popen(
            ["docker", "-H", manager.socket, "save", IMAGE], stdout=subprocess.PIPE
        )
        worker.docker("load", stdin=save.stdout.fileno() if save.stdout else None, timeout=600)
        assert save.wait(timeout=60) == 0


def build_image(env: Mapping[str, str]) -> None:
    """``scripts/docker-image`` on the engine ``env`` names (``DOCKER_HOST``), or fail loudly."""
    build = subprocess.run(
        ["bash", "scripts/docker-image", "--base", BASE_IMAGE, "--tag", IMAGE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(env),
    )
    if build.returncode != 0:
        raise AssertionError(f"scripts/docker-image failed: {build.stdout[-2000:]}{build.stderr}")


def deploy(swarm: SwarmHosts, stack: str, pool: Path, port: int, **settings: str) -> str:
    """``docker stack deploy`` the compose file plus the override; return the dashboard URL.

    The key pool volume is created first on every host as a bind of one shared directory.
    """
    pool.mkdir(parents=True, exist_ok=True)
    for host in swarm.hosts:
        host.docker(
            "volume", "create", "--driver", "local", "--opt", "type=none", "--opt", "o=bind",
            "--opt", f"device={pool}", "--label", f"com.docker.stack.namespace={stack}",
            f"{stack}_keys-pool",
        )  # fmt: skip
    env = {
        **os.environ,
        "GOSSIP_IMAGE": IMAGE,
        "GOSSIP_MOSQUITTO_IMAGE": BASE_IMAGE,
        "GOSSIP_GRAPH": f"complete:{N}",
        "GOSSIP_NODES": str(N),
        "GOSSIP_VALUES": "gaussian:7",
        "GOSSIP_DASHBOARD_PUBLISH": str(port),
        **settings,
    }
    # --resolve-image never: the hosts hold the image; asking a registry for its digest (none
    # is reachable) only costs time.
    swarm.manager.docker(
        "stack", "deploy", "--resolve-image", "never", "-c", str(ROOT / "docker-compose.yml"),
        "-c", str(OVERRIDE), stack,
        env=env, timeout=300,
    )  # fmt: skip
    return f"http://{swarm.manager.address}:{port}"


def tasks(swarm: SwarmHosts, service: str) -> list[dict[str, Any]]:
    """The tasks of ``service`` (``docker service ps``), with their overlay addresses."""
    out = swarm.manager.docker(
        "service", "ps", "--no-trunc", "--format", "{{json .}}", service
    ).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    for row in rows:
        # Earlier tasks of a slot are listed with a backslash-underscore prefix.
        row["Name"] = row["Name"].replace("\\_", "").strip()
        inspect = swarm.manager.docker("inspect", row["ID"]).stdout
        attachments = json.loads(inspect)[0].get("NetworksAttachments") or []
        row["addresses"] = [a.split("/")[0] for n in attachments for a in n.get("Addresses", [])]
    return rows


def running_hosts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many tasks run on each host."""
    counts: dict[str, int] = {}
    for row in rows:
        if row["CurrentState"].startswith("Running") and row["DesiredState"] == "Running":
            counts[row["Node"]] = counts.get(row["Node"], 0) + 1
    return counts


def overlay_peers(swarm: SwarmHosts, network: str) -> set[str]:
    """The hosts the overlay network spans now: its gossip peers' addresses, on the manager.

    A host counts while a task of it is attached, so this is read while the nodes run.
    """
    out = swarm.manager.docker("network", "inspect", "--verbose", network, check=False).stdout
    found = json.loads(out) if out.strip() else []
    return {p["IP"] for p in (found[0].get("Peers") or [])} if found else set()


def final_state(
    url: str, timeout: float, meanwhile: Callable[[], None] | None = None
) -> dict[str, Any]:
    """Wait for the run's final result, calling ``meanwhile`` (a probe of the stack) each time."""

    def final() -> Any:
        if meanwhile is not None:
            meanwhile()
        state = get_json(f"{url}/api/state")
        return state if state.get("final") is not None else None

    return dict(poll("the stack's run to end", final, timeout=timeout, every=1.0))


def host_of_node(state: Mapping[str, Any], rows: list[dict[str, Any]]) -> dict[int, str]:
    """Each registered node's host, from its advertised (overlay) address and the tasks'."""
    host_of_address = {a: row["Node"] for row in rows for a in row["addresses"]}
    return {
        n["node"]: host_of_address.get(n["address"].split("//")[-1].rsplit(":", 1)[0], "?")
        for n in state["nodes"]
    }


def cross_host_pairs(state: Mapping[str, Any], host_of: Mapping[int, str]) -> set[frozenset[str]]:
    """The pairs of hosts between which some node has applied an exchange so far."""
    pairs: set[frozenset[str]] = set()
    for n in state["nodes"]:
        for peer, count in (n.get("edges") or {}).items():
            here, there = host_of.get(n["node"], "?"), host_of.get(int(peer), "?")
            if count > 0 and "?" not in (here, there) and here != there:
                pairs.add(frozenset((here, there)))
    return pairs


def test_nodes_spread_over_three_hosts_exchange_then_a_lost_host_s_nodes_are_declared_dead(
    hosts: SwarmHosts, tmp_path: Path
) -> None:
    # One deployment, one run (a stack deploy costs about a minute here, so the spread and the
    # loss share it): the replicas run on all three hosts, two each, and exchange across every
    # pair of hosts over the overlay; then a worker is cut off, its two nodes are declared dead,
    # and the four survivors end exact.
    stack = "gossipmh"
    started_at = time.monotonic()
    # Slow enough that the run is still going when the host is lost: ARG on complete:6 needs
    # about 160 activations to 1e-9 (measured), so at 3/s this run lasts about a minute.
    url = deploy(
        hosts, stack, tmp_path / "pool", 18082,
        GOSSIP_RATE="3", GOSSIP_UNTIL="1e-12", GOSSIP_DEAD_AFTER="4",
    )  # fmt: skip

    def started() -> Any:
        state = get_json(f"{url}/api/state")
        # Registered is not begun: the nodes register, set up, then say they are ready.
        phase = state["summary"]["phase"]
        begun = phase in ("stopping", "done", "failed") or (
            phase == "running" and (state["summary"]["t"] or 0) > 0
        )
        return state if len(state["registered"]) == N and begun else None

    state = poll("all nodes to run", started, timeout=420, every=0.5)
    FIGURES["swarm3_deploy_to_running_s"] = round(time.monotonic() - started_at, 1)
    assert state["summary"]["phase"] == "running", f"the run ended too soon: {state['summary']}"
    rows = tasks(hosts, f"{stack}_node")
    # Spread: two node tasks running on each of the three hosts.
    assert running_hosts(rows) == {h.name: PER_HOST for h in hosts.hosts}, rows

    # Before the cut, while the nodes run: the overlay network spans the three hosts (its peers
    # are their addresses), the nodes advertise their overlay addresses, and every pair of
    # hosts has exchanged (an exchange applied on an edge between two hosts' nodes).
    all_pairs = {frozenset((a.name, b.name)) for a in hosts.hosts for b in hosts.hosts if a != b}
    peers: set[str] = set()
    seen_pairs: set[frozenset[str]] = set()

    def spanning() -> Any:
        peers.update(overlay_peers(hosts, f"{stack}_gossip"))
        state = get_json(f"{url}/api/state")
        seen_pairs.update(cross_host_pairs(state, host_of_node(state, rows)))
        reported = sum(1 for n in state["nodes"] if n.get("address"))
        spans = peers == {h.address for h in hosts.hosts} and seen_pairs == all_pairs
        return state if spans and reported == N else None

    try:
        state = poll("the three hosts to exchange over the overlay", spanning, timeout=120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; overlay peers {peers}, host pairs {seen_pairs}") from None
    assert state["summary"]["phase"] == "running", f"the run ended too soon: {state['summary']}"
    node_addresses = {n["address"].split("//")[-1].rsplit(":", 1)[0] for n in state["nodes"]}
    task_addresses = {a for row in rows for a in row["addresses"]}
    assert len(node_addresses) == N, state["nodes"]
    assert node_addresses <= task_addresses, (node_addresses, task_addresses)

    lost: Host = hosts.hosts[2]
    lost_addresses = {
        a for row in rows if row["Node"] == lost.name and row["DesiredState"] == "Running"
        for a in row["addresses"]
    }  # fmt: skip
    lost_slots = {row["Name"] for row in rows if row["Node"] == lost.name}
    cut_at = time.monotonic()
    hosts.cut(lost)
    # While the run goes on, what Swarm does with the lost host's slots: a replacement task
    # that ran elsewhere would be a rescheduling (its node registering under a new address).
    seen: list[str] = []

    def replacements() -> None:
        seen.extend(
            f"{row['Name']} {row['Node'] or '-'} {row['CurrentState'].split(' ')[0]}"
            for row in tasks(hosts, f"{stack}_node")
            if row["Name"] in lost_slots and row["Node"] != lost.name
        )

    state = final_state(url, timeout=420, meanwhile=replacements)
    FIGURES["swarm3_host_lost_to_end_s"] = round(time.monotonic() - cut_at, 1)

    by_id = {n["node"]: n for n in state["nodes"]}
    departed = set(state["membership"]["departed"])
    lost_ids = {
        k for k, n in by_id.items() if n["address"].split("//")[-1].rsplit(":", 1)[0]
        in lost_addresses
    }  # fmt: skip
    # Declared dead: exactly the lost host's nodes, each by the dead-after rule.
    assert len(lost_ids) == PER_HOST, (lost_addresses, by_id)
    assert departed == lost_ids, (departed, lost_ids, state["membership"])
    kinds = [e["kind"] for e in state["membership"]["events"]]
    assert kinds.count("dead") == PER_HOST, state["membership"]["events"]

    # Not rescheduled: while the run went on, no replacement of the lost host's slots ran
    # elsewhere (the survivors hold two replicas each: the replacements wait, Pending), and
    # no node registered anew (the lost ids kept their old addresses, found above).
    assert not [row for row in seen if row.endswith(" Running")], seen
    assert set(kinds) == {"dead"}, state["membership"]["events"]
    FIGURES["swarm3_lost_slots_during_run"] = sorted(set(seen))

    # Swarm itself sees the host Down. (After the run the survivors' tasks have exited, so it
    # may then place the replacements on them: they find the run over.)
    def down() -> bool:
        out = hosts.manager.docker("node", "ls", "--format", "{{.Hostname}} {{.Status}}").stdout
        return f"{lost.name} Down" in out.splitlines()

    poll(f"the manager to see {lost.name} Down", down, timeout=120, every=1.0)

    summary, final = state["summary"], state["final"]
    # The whole story on failure: the stop reason and the coordinator's last message.
    story = {k: state.get(k) for k in ("summary", "message", "membership")}
    story["history_tail"] = state["history"][-5:]
    assert summary["reached"], json.dumps(story)[:4000]
    assert final["complete"], final
    assert final["error"] <= 1e-12 * 3
    survivors = sorted(set(by_id) - departed)
    initial = [state["initial"][k] for k in survivors]
    mean = [sum(col) / len(initial) for col in zip(*initial, strict=True)]
    # The membership rule: the survivors end on the mean of their own initial values.
    assert final["mean"] == pytest.approx(mean, rel=1e-12, abs=1e-12)
    assert len(final["values"]) == len(survivors)
    for values in final["values"]:
        assert values == pytest.approx(mean, abs=1e-4)
    assert final["mass_drift_rel"] < 1e-9
    FIGURES["swarm3_outcome"] = "declared dead"
