"""deploy/k8s, checked without a cluster: the manifests against the Kubernetes API schema, and
the containers against the compose/Swarm file they mirror.

* every object (the resources and what the kustomization generates) validates, strictly (an
  unknown field is an error), against the schemas the ``kubernetes-validate`` package ships
  (offline), for the oldest and the newest Kubernetes it knows; a broken copy does not;
* every ConfigMap, Secret, Service and service account a pod refers to exists;
* per role (keys, mosquitto, coordinator, node) the command, the ``GOSSIP_*`` (and ``MQTT_*``)
  environment at its defaults and the mount points are compose's, except the differences
  listed below, each with its reason.

No cluster runs here: that the pods start and the run reaches eps on Kubernetes is not tested.
"""

from __future__ import annotations

import base64
import copy
import re
from typing import Any

import kubernetes_validate
import pytest
from k8s_manifests import (
    K8S,
    ROOT,
    built,
    compose_environment,
    compose_services,
    config_maps,
    container,
    environment,
    find,
    generated,
    kustomization,
    kustomize_command,
    pod_spec,
    resources,
    secrets,
)

# The oldest and the newest Kubernetes whose schemas the package ships.
VERSIONS = sorted(
    {kubernetes_validate.utils.all_versions()[0], kubernetes_validate.latest_version()}
)
# The Secrets the keys Job creates (deploy/k8s/scripts/upload_keys.py), not kustomize.
JOB_SECRETS = {"gossip-coordinator-keys", "gossip-node-keys", "gossip-mqtt-accounts"}

# What compose sets and Kubernetes does not, per role, and why.
COMPOSE_ONLY = {
    "keys": {"GOSSIP_INSECURE": "secure only: the pods mount the key Secrets"},
    "mosquitto": {"GOSSIP_INSECURE": "secure only: the pods mount the key Secrets"},
    "coordinator": {"GOSSIP_INSECURE": "secure only: the pods mount the key Secrets"},
    "node": {
        "GOSSIP_INSECURE": "secure only: the pods mount the key Secrets",
        "GOSSIP_TASK_SLOT": "Swarm's template for a stable name; a StatefulSet pod's hostname "
        "(node-K) is stable already",
    },
}
# What Kubernetes sets and compose does not, per role, and why.
K8S_ONLY = {
    "coordinator": {
        "MQTT_PASSWORD": "the broker's password, from its Secret into GOSSIP_BROKER ($(VAR))",
    },
    "node": {
        "GOSSIP_BIND": "binds its stable DNS name node-K.node, port 7000",
        "GOSSIP_ADVERTISE": "advertises it: a restarted pod keeps its address",
    },
}


def objects_read() -> list[dict[str, Any]]:
    """The objects as these tests read them (tests/deploy/k8s_manifests.py)."""
    return resources() + generated()


def _label(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def test_the_kustomization_lists_every_manifest_and_its_files_exist() -> None:
    listed = set(kustomization()["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk, f"listed {sorted(listed)}, on disk {sorted(on_disk)}"
    for entry in kustomization()["configMapGenerator"]:
        for file in entry.get("files", []):
            assert (K8S / file).is_file(), file
    # kustomize loads nothing outside deploy/k8s, so the broker's files are copies: the same.
    for name in ("entrypoint.sh", "mosquitto.conf"):
        copied = (K8S / "mosquitto" / name).read_text()
        assert copied == (ROOT / "deploy" / "mosquitto" / name).read_text(), name


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates_strictly_against_the_api_schema(version: str) -> None:
    checked = []
    for obj in objects_read():
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(p) for p in error.path)
            pytest.fail(f"{_label(obj)} against Kubernetes {version}: {path}: {error.message}")
        checked.append(_label(obj))
    kinds = {label.split("/")[0] for label in checked}
    expected = {"ServiceAccount", "Role", "RoleBinding", "Job", "Service", "Deployment"}
    assert kinds >= expected | {"StatefulSet", "ConfigMap", "Secret"}, kinds


@pytest.mark.parametrize(
    ("where", "breaks"),
    [
        # A misspelt field: strict validation knows every field of the API.
        ("spec.servicename", lambda s: s["spec"].update(servicename=s["spec"].pop("serviceName"))),
        # A wrong type: a port is a number.
        (
            "containerPort",
            lambda s: s["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(
                containerPort="seven thousand"
            ),
        ),
        # A required field gone: a container needs a name.
        ("name", lambda s: s["spec"]["template"]["spec"]["containers"][0].pop("name")),
    ],
)
def test_a_broken_copy_fails_validation(where: str, breaks: Any) -> None:
    statefulset = find("StatefulSet", "node")
    version = VERSIONS[-1]
    kubernetes_validate.validate(statefulset, version, strict=True)  # the shipped one passes
    broken = copy.deepcopy(statefulset)
    breaks(broken)
    with pytest.raises(kubernetes_validate.ValidationError) as caught:
        kubernetes_validate.validate(broken, version, strict=True)
    said = ".".join(str(p) for p in caught.value.path) + " " + caught.value.message
    assert where.split(".")[-1] in said, said


def test_every_reference_resolves() -> None:
    maps, keys = set(config_maps()), set(secrets()) | JOB_SECRETS
    names = {(r["kind"], r["metadata"]["name"]) for r in resources()}
    for workload in (r for r in resources() if r["kind"] in ("Deployment", "StatefulSet", "Job")):
        spec = pod_spec(workload)
        label = _label(workload)
        account = spec.get("serviceAccountName")
        if account is not None:
            assert ("ServiceAccount", account) in names, label
        else:
            # Only the keys Job talks to the API: nothing else gets a token.
            assert spec["automountServiceAccountToken"] is False, label
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                assert volume["configMap"]["name"] in maps, (label, volume)
            if "secret" in volume:
                assert volume["secret"]["secretName"] in keys, (label, volume)
        mounted = {v["name"] for v in spec.get("volumes", [])}
        for each in spec.get("initContainers", []) + spec["containers"]:
            for mount in each.get("volumeMounts", []):
                assert mount["name"] in mounted, (label, mount)
            for source in each.get("envFrom", []):
                assert source["configMapRef"]["name"] in maps, (label, source)
            for var in each.get("env", []):
                ref = var.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    assert ref["secretKeyRef"]["name"] in keys, (label, var)
                if "configMapKeyRef" in ref:
                    assert ref["configMapKeyRef"]["name"] in maps, (label, var)
    # Every Service selects the pods of some workload.
    for service in (r for r in resources() if r["kind"] == "Service"):
        selector = service["spec"]["selector"]
        assert any(
            selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
            for w in resources()
            if w["kind"] in ("Deployment", "StatefulSet")
        ), _label(service)
    for entry in kustomization()["replicas"]:
        assert ("StatefulSet", entry["name"]) in names, entry


def test_nodes_have_stable_names_behind_a_headless_service() -> None:
    statefulset = find("StatefulSet", "node")
    service = find("Service", statefulset["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    env = environment(container(statefulset, "node"))
    # node-K.node: the pod's name under its headless Service, bound and advertised.
    name = f"<metadata.name>.{service['metadata']['name']}"
    assert env["GOSSIP_ADVERTISE"] == name
    assert env["GOSSIP_BIND"] == f"tcp://{name}:7000"
    # The nodes' key names are node-K, the pods' names too: the StatefulSet is `node`.
    assert statefulset["metadata"]["name"] == "node"


def test_the_node_count_is_set_in_one_place_and_matches_the_graph() -> None:
    from continuized.gossip.graph.topology import parse_topology

    (entry,) = kustomization()["replicas"]
    graph = config_maps()["gossip-graph"]["GOSSIP_GRAPH"]
    per_pod = int(config_maps()["gossip-node"]["GOSSIP_NODES_PER_PROCESS"])
    assert entry["count"] * per_pod == parse_topology(graph).n, (entry, graph, per_pod)
    # Nowhere else: the StatefulSet leaves its count to the kustomization.
    assert "replicas" not in find("StatefulSet", "node")["spec"]


# ---- the same roles as compose and Swarm ------------------------------------------------------


# Each role's workload and container in deploy/k8s.
WORKLOADS = {
    "keys": ("Job", "gossip-keys", "keys"),
    "mosquitto": ("Deployment", "mosquitto", "mosquitto"),
    "coordinator": ("Deployment", "coordinator", "coordinator"),
    "node": ("StatefulSet", "node", "node"),
}


def _role(role: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The compose service and the Kubernetes container of a role."""
    kind, name, box = WORKLOADS[role]
    return compose_services()[role], container(find(kind, name), box)


ROLES = ["keys", "mosquitto", "coordinator", "node"]


@pytest.mark.parametrize("role", ROLES)
def test_the_environment_is_compose_s(role: str) -> None:
    service, box = _role(role)
    ours = {k: v for k, v in environment(box).items() if k.startswith(("GOSSIP_", "MQTT_"))}
    theirs = compose_environment(service)
    skipped = COMPOSE_ONLY.get(role, {})
    added = K8S_ONLY.get(role, {})
    assert set(theirs) - set(skipped) == set(ours) - set(added), (
        f"{role}: only in compose {sorted(set(theirs) - set(ours) - set(skipped))}, "
        f"only in deploy/k8s {sorted(set(ours) - set(theirs) - set(added))}"
    )
    for name in set(theirs) & set(ours):
        assert ours[name] == theirs[name], (
            f"{role}: {name} is {ours[name]!r}, compose {theirs[name]!r}"
        )
    for name in skipped:
        assert name not in ours, f"{role}: {name} is listed as compose-only"


@pytest.mark.parametrize("role", ROLES)
def test_the_command_is_compose_s(role: str) -> None:
    service, box = _role(role)
    if role == "keys":
        # The same `gossip keys init`, through the image's entrypoint, then the upload.
        (script,) = box["args"]
        assert box["command"] == ["/bin/sh", "-c"]
        words = script.split()
        assert words[0] == "gossip-entrypoint"
        assert words[1 : 1 + len(service["command"])] == service["command"]
        assert "upload_keys.py" in script
    elif role == "mosquitto":
        assert box["command"] == service["entrypoint"]
        assert "args" not in box
    else:
        # The image's entrypoint (deploy/entrypoint.sh) with compose's command.
        assert "command" not in box
        assert box["args"] == service["command"]


@pytest.mark.parametrize("role", ["mosquitto", "coordinator", "node"])
def test_the_mount_points_are_compose_s(role: str) -> None:
    service, box = _role(role)
    theirs = {volume.split(":")[1] for volume in service["volumes"]}
    ours = {mount["mountPath"] for mount in box["volumeMounts"]}
    if role == "mosquitto":
        # The broker's retained messages outlive a restart of its container: compose restarts
        # the same container (its files stay), Kubernetes starts a new one in the pod, so
        # there they live in an emptyDir of the pod's.
        state = [m for m in box["volumeMounts"] if m["mountPath"] == "/tmp/mosquitto"]
        assert [m["name"] for m in state] == ["state"], box["volumeMounts"]
        ours -= {"/tmp/mosquitto"}
    assert theirs == ours, (role, theirs, ours)


def test_the_probes_are_compose_s_healthchecks() -> None:
    services = compose_services()
    coordinator = container(find("Deployment", "coordinator"), "coordinator")
    assert (
        coordinator["readinessProbe"]["exec"]["command"]
        == services["coordinator"]["healthcheck"]["test"][1:]
    )
    broker = container(find("Deployment", "mosquitto"), "mosquitto")
    shell = services["mosquitto"]["healthcheck"]["test"][1].replace("$$", "$")
    assert broker["readinessProbe"]["exec"]["command"] == ["/bin/sh", "-c", shell]


KUSTOMIZE = kustomize_command()


def _hash_free(name: str) -> str:
    """A generated name without kustomize's content hash (name-<10 characters>)."""
    return re.sub(r"-[a-z0-9]{10}$", "", name)


@pytest.mark.skipif(KUSTOMIZE is None, reason="neither kustomize nor kubectl is installed")
def test_kustomize_builds_it_and_the_build_is_what_these_tests_read() -> None:
    """What `kubectl apply -k` would send: valid, and the objects the other tests read."""
    assert KUSTOMIZE is not None
    objects = built(KUSTOMIZE)
    for obj in objects:
        kubernetes_validate.validate(obj, VERSIONS[-1], strict=True)
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "continuized-gossip"
    maps = {o["metadata"]["name"]: o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"}
    keys = {
        o["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in o["data"].items()}
        for o in objects
        if o["kind"] == "Secret"
    }
    assert {_hash_free(name): data for name, data in maps.items()} == config_maps()
    assert {_hash_free(name): data for name, data in keys.items()} == secrets()
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert {(kind, _hash_free(name)) for kind, name in by_name} == {
        (o["kind"], o["metadata"]["name"]) for o in objects_read()
    }
    # The count comes from `replicas:`, the images from `images:`.
    count = kustomization()["replicas"][0]["count"]
    assert by_name["StatefulSet", "node"]["spec"]["replicas"] == count
    for role in ROLES:
        kind, name, box = WORKLOADS[role]
        ours = container(by_name[kind, name], box)
        assert ours["image"] in ("continuized-gossip:latest", "eclipse-mosquitto:2"), ours
        # The references now name the hashed objects, and resolve to what the tests read.
        assert environment(ours, maps, keys) == environment(_role(role)[1]), role
