"""Store the keys of ``gossip keys init --pool`` in three Kubernetes Secrets (deploy/k8s).

The gossip-keys Job runs it after ``gossip keys init --dir /keys --pool``, under a service
account that may only create Secrets and read these three::

    python upload_keys.py /keys

=========================  ===================================================================
Secret                     from
=========================  ===================================================================
gossip-coordinator-keys    DIR/coordinator/* (CURVE key, allow-list, MQTT secret)
gossip-node-keys           DIR/pool/node-K/identity.json and secret.key, as node-K.identity.json
                           and node-K.secret.key (one Secret: a StatefulSet's pods share one
                           template; each pod's init container copies out its own pair)
gossip-mqtt-accounts       DIR/mqtt/passwd and acl (password hashes only)
=========================  ===================================================================

Each also holds ``ready`` (what the pods wait for) and says for how many nodes its keys are
(the annotation ``continuized-gossip/nodes``). The rule: if all three are there for as many
nodes, they are kept and the new keys dropped (a re-run changes nothing); if none is there, all
three are created; anything else (another count, a partial set) is an error that names the fix.

Standard library only: the image has no Kubernetes client. The API is
``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`` with the pod's service account
token, CA and namespace; ``K8S_API_URL`` and ``K8S_SERVICE_ACCOUNT_DIR`` replace them (an
``http://`` URL, such as ``kubectl proxy``'s, is used without a token check of its own).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

COORDINATOR = "gossip-coordinator-keys"
NODES = "gossip-node-keys"
MQTT = "gossip-mqtt-accounts"
NODES_ANNOTATION = "continuized-gossip/nodes"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
FIX = (
    "to provision new keys, remove them and run the Job again: kubectl delete secret "
    f"{COORDINATOR} {NODES} {MQTT} && kubectl delete job gossip-keys && kubectl apply -k "
    "deploy/k8s (the pods then restart with the new keys)"
)


class UploadError(Exception):
    """The keys could not be stored; the message says why and what to do."""


def secret_files(keys: Path) -> dict[str, dict[str, bytes]]:
    """Map each Secret's name to its files (key -> content), read from ``gossip keys init``.

    Parameters
    ----------
    keys : Path
        The ``--dir`` of ``gossip keys init --pool``.
    """
    pool = keys / "pool"
    nodes: dict[str, bytes] = {}
    for directory in sorted(pool.glob("node-*")):
        for name in ("identity.json", "secret.key"):
            nodes[f"{directory.name}.{name}"] = (directory / name).read_bytes()
    if not nodes:
        raise UploadError(f"no node keys in {pool}: was `gossip keys init --pool` run?")
    coordinator = {
        path.name: path.read_bytes()
        for path in sorted((keys / "coordinator").iterdir())
        if path.is_file() and path.name != "ready"
    }
    mqtt = {name: (keys / "mqtt" / name).read_bytes() for name in ("passwd", "acl")}
    for files in (coordinator, nodes, mqtt):
        files["ready"] = b""
    return {NODES: nodes, MQTT: mqtt, COORDINATOR: coordinator}


def node_count(files: dict[str, bytes]) -> int:
    """Return how many node key pairs ``gossip-node-keys``' files hold."""
    return sum(1 for name in files if name.endswith(".identity.json"))


def secret_body(name: str, files: dict[str, bytes], nodes: int) -> dict[str, Any]:
    """Return the Secret object ``name`` holding ``files``, for a cluster of ``nodes`` nodes."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/part-of": "continuized-gossip",
                "app.kubernetes.io/component": "keys",
            },
            "annotations": {NODES_ANNOTATION: str(nodes)},
        },
        "data": {key: base64.b64encode(value).decode() for key, value in files.items()},
    }


class Api:
    """The few calls made to the Kubernetes API: get and create a Secret."""

    def __init__(self, url: str, namespace: str, token: str, ca: Path | None) -> None:
        self._url = url.rstrip("/")
        self._path = f"/api/v1/namespaces/{namespace}/secrets"
        self._token = token
        self._context = ssl.create_default_context(cafile=str(ca)) if ca is not None else None

    @classmethod
    def in_pod(cls) -> Api:
        """The API as seen from a pod (or as ``K8S_API_URL`` / ``K8S_SERVICE_ACCOUNT_DIR`` say)."""
        account = Path(os.environ.get("K8S_SERVICE_ACCOUNT_DIR", SERVICE_ACCOUNT))
        url = os.environ.get("K8S_API_URL")
        if url is None:
            host = os.environ.get("KUBERNETES_SERVICE_HOST")
            if not host:
                raise UploadError(
                    "KUBERNETES_SERVICE_HOST is not set: run inside a pod, or set K8S_API_URL"
                )
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            url = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        try:
            token = (account / "token").read_text().strip()
            namespace = (account / "namespace").read_text().strip()
        except OSError as error:
            raise UploadError(
                f"no service account in {account} ({error}): the Job needs its "
                "serviceAccountName (gossip-keys) with its token mounted"
            ) from None
        ca = account / "ca.crt"
        return cls(url, namespace, token, ca if url.startswith("https") else None)

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """One call: the object answered, or None for a 404 (an absent Secret)."""
        request = urllib.request.Request(
            self._url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Authorization": f"Bearer {self._token}",
                "Accept": "application/json",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, context=self._context, timeout=30) as answer:
                found: dict[str, Any] = json.load(answer)
                return found
        except urllib.error.HTTPError as error:
            if error.code == 404 and method == "GET":
                return None
            said = error.read().decode(errors="replace")[:300]
            hint = (
                " (the Job's service account needs the Role gossip-keys: create on secrets, "
                "get on the three key Secrets)"
                if error.code == 403
                else ""
            )
            raise UploadError(f"{method} {path}: HTTP {error.code}{hint}: {said}") from None
        except urllib.error.URLError as error:
            raise UploadError(f"{method} {self._url}{path}: {error.reason}") from None

    def node_count(self, name: str) -> str | None:
        """The node count the Secret ``name`` was made for ("" if unsaid; None: no Secret)."""
        found = self._request("GET", f"{self._path}/{name}")
        if found is None:
            return None
        annotations = found.get("metadata", {}).get("annotations") or {}
        return str(annotations.get(NODES_ANNOTATION, ""))

    def create(self, body: dict[str, Any]) -> None:
        """Create the Secret ``body``."""
        self._request("POST", self._path, body)


def upload(keys: Path, api: Api) -> str:
    """Store the keys of ``keys`` in the Secrets unless they are there; return what was done.

    Raises
    ------
    UploadError
        When the Secrets exist for another node count, or only some of them exist.
    """
    secrets = secret_files(keys)
    nodes = node_count(secrets[NODES])
    found = {name: api.node_count(name) for name in secrets}
    present = {name: count for name, count in found.items() if count is not None}
    if len(present) == len(secrets):
        if all(count == str(nodes) for count in present.values()):
            return f"kept the Secrets {', '.join(secrets)}: keys for {nodes} nodes"
        raise UploadError(
            f"the Secrets hold keys for {sorted(set(present.values()))} nodes, not {nodes} "
            f"(the graph's count); {FIX}"
        )
    if present:
        missing = sorted(set(secrets) - set(present))
        raise UploadError(
            f"only some of the key Secrets exist ({', '.join(sorted(present))}; missing "
            f"{', '.join(missing)}): their keys would not match new ones; {FIX}"
        )
    for name, files in secrets.items():
        api.create(secret_body(name, files, nodes))
    return f"created the Secrets {', '.join(secrets)}: keys for {nodes} nodes"


def main(argv: list[str]) -> int:
    """``upload_keys.py DIR``: exit 0 when the Secrets hold the cluster's keys, 1 if not."""
    if len(argv) != 1:
        print("usage: upload_keys.py DIR (the --dir of gossip keys init --pool)", file=sys.stderr)
        return 2
    try:
        print(upload(Path(argv[0]), Api.in_pod()))
    except UploadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
