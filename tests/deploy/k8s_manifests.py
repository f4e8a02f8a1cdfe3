"""Reading deploy/k8s as ``kubectl apply -k`` would, without kubectl: the kustomization's
resources and what its generators make, and a container's environment as the kubelet sets it.

Only what deploy/k8s uses is read (literals and files of the generators, envFrom, env with a
value, a ConfigMap or Secret key, or a pod field); kustomize's name hashes are left out, since
kustomize rewrites the references to match.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
COMPOSE = ROOT / "docker-compose.yml"


def kustomization() -> dict[str, Any]:
    """deploy/k8s/kustomization.yaml."""
    loaded: dict[str, Any] = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return loaded


def resources() -> list[dict[str, Any]]:
    """Every object of the kustomization's resources, in their files' order."""
    objects: list[dict[str, Any]] = []
    for name in kustomization()["resources"]:
        objects += [doc for doc in yaml.safe_load_all((K8S / name).read_text()) if doc]
    return objects


def _pairs(entry: dict[str, Any]) -> dict[str, str]:
    data: dict[str, str] = {}
    for literal in entry.get("literals", []):
        key, _, value = literal.partition("=")
        data[key] = value
    for file in entry.get("files", []):
        data[Path(file).name] = (K8S / file).read_text()
    return data


def config_maps() -> dict[str, dict[str, str]]:
    """The generated ConfigMaps: name -> data."""
    return {e["name"]: _pairs(e) for e in kustomization().get("configMapGenerator", [])}


def secrets() -> dict[str, dict[str, str]]:
    """The generated Secrets: name -> data (in clear)."""
    return {e["name"]: _pairs(e) for e in kustomization().get("secretGenerator", [])}


def generated() -> list[dict[str, Any]]:
    """The generated ConfigMaps and Secrets as API objects."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
        for name, data in config_maps().items()
    ]
    for name, data in secrets().items():
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {"name": name},
                "data": encoded,
            }
        )
    return objects


def find(kind: str, name: str) -> dict[str, Any]:
    """The resource of this kind and name."""
    found = [r for r in resources() if r["kind"] == kind and r["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind} named {name} in deploy/k8s"
    return found[0]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    """The pod template's spec of a Deployment, StatefulSet or Job."""
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    """The (main) container ``name`` of a workload."""
    found: list[dict[str, Any]] = [c for c in pod_spec(workload)["containers"] if c["name"] == name]
    assert len(found) == 1, f"no container {name} in {workload['metadata']['name']}"
    return found[0]


def environment(
    spec: dict[str, Any],
    maps: dict[str, dict[str, str]] | None = None,
    keys: dict[str, dict[str, str]] | None = None,
) -> dict[str, str]:
    """A container's environment as the kubelet sets it: envFrom, then env (which wins), with
    ``$(VAR)`` expanded from the variables before it; a pod field reads ``<fieldPath>``.

    The ConfigMaps and Secrets are the generated ones unless ``maps`` and ``keys`` are given.
    """
    maps = config_maps() if maps is None else maps
    keys = secrets() if keys is None else keys
    env: dict[str, str] = {}
    for source in spec.get("envFrom", []):
        env.update(maps[source["configMapRef"]["name"]])
    for var in spec.get("env", []):
        if "value" in var:
            env[var["name"]] = re.sub(
                r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), str(var["value"])
            )
            continue
        source = var["valueFrom"]
        if "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            env[var["name"]] = maps[ref["name"]][ref["key"]]
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[var["name"]] = keys[ref["name"]][ref["key"]]
        else:
            env[var["name"]] = f"<{source['fieldRef']['fieldPath']}>"
    return env


def compose_services() -> dict[str, Any]:
    """docker-compose.yml's services, with the x-gossip anchor merged in."""
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def compose_environment(service: dict[str, Any]) -> dict[str, str]:
    """A compose service's environment with every ``${VAR:-default}`` at its default."""
    return {
        name: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))
        for name, value in (service.get("environment") or {}).items()
    }


def kustomize_command() -> list[str] | None:
    """``kustomize build`` or ``kubectl kustomize``, whichever is installed (None: neither)."""
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        probe = subprocess.run(
            ["kubectl", "kustomize", "--help"], capture_output=True, text=True, timeout=60
        )
        if probe.returncode == 0:
            return ["kubectl", "kustomize"]
    return None


def built(command: list[str]) -> list[dict[str, Any]]:
    """What kustomize makes of deploy/k8s (offline: it reads only the directory)."""
    done = subprocess.run([*command, str(K8S)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]
