"""Helpers of the deployment tests: commands, polling, and Compose projects watched with the
docker SDK."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# scripts/docker-image's bootstrapped Debian base, named after its recipe's fingerprint (the
# start of scripts/docker-base's sha256), as the script names it.
BASE_RECIPE = hashlib.sha256((ROOT / "scripts" / "docker-base").read_bytes()).hexdigest()[:12]
BASE_IMAGE = f"gossip-base:bookworm-{BASE_RECIPE}"
# GOSSIP_TEST_IMAGE: another tag, so that two test runs on one engine do not rebuild each
# other's image under their feet.
IMAGE = os.environ.get("GOSSIP_TEST_IMAGE", "continuized-gossip:test")
ARM64_BASE = f"{BASE_IMAGE}-arm64"  # scripts/docker-image's default for a foreign arm64
# Its own tag, apart from the amd64 test image (GOSSIP_TEST_IMAGE) built by the other tests.
ARM64_IMAGE = os.environ.get("GOSSIP_TEST_IMAGE_ARM64", "continuized-gossip:test-arm64")

# Figures measured by the tests, printed at the end of the session and saved next to the runs.
FIGURES: dict[str, Any] = {}


def unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI must run the Docker tests)")
    pytest.skip(why)


def run(argv: list[str], timeout: float = 600, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run a command from the project root; raise with its output if it fails."""
    done = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {done.returncode}\n--- stdout\n{done.stdout[-4000:]}"
            f"\n--- stderr\n{done.stderr[-4000:]}"
        )
    return done


def image_exists(client: Any, name: str) -> bool:
    import docker  # type: ignore[import-untyped]

    try:
        client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    return True


def compose_command() -> list[str]:
    """``docker compose`` when the CLI has the plugin, else Debian's ``docker-compose``."""
    plugin = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    if plugin.returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose") is None:
        unavailable("neither `docker compose` nor docker-compose is installed")
    return ["docker-compose"]


def free_port() -> int:
    """A TCP port free on the host right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout: float = 3.0) -> Any:
    """GET ``url`` and decode its JSON body."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def poll(what: str, probe: Callable[[], Any], timeout: float, every: float = 0.25) -> Any:
    """Call ``probe`` until it returns something truthy; fail naming ``what`` after ``timeout``.

    Exceptions from ``probe`` (a port not answering yet) count as "not yet".
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except Exception as exc:  # anything here just means "not yet"
            last = exc
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; last: {last!r}")


@dataclass
class ComposeProject:
    """One Compose project of docker-compose.yml, driven by the CLI and watched with the SDK."""

    client: Any
    name: str
    env: dict[str, str]
    command: list[str] = field(default_factory=compose_command)

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run a compose subcommand on this project."""
        return run(
            [*self.command, "-p", self.name, "-f", str(ROOT / "docker-compose.yml"), *args],
            timeout=timeout,
            env={**os.environ, **self.env},
        )

    def containers(self, service: str | None = None) -> list[Any]:
        """The project's containers (all states), optionally of one service."""
        labels = [f"com.docker.compose.project={self.name}"]
        if service is not None:
            labels.append(f"com.docker.compose.service={service}")
        # A container removed between the listing and its inspection is simply gone.
        filters = {"label": labels}
        return list(self.client.containers.list(all=True, filters=filters, ignore_removed=True))

    def networks(self) -> list[Any]:
        """The project's networks."""
        label = f"com.docker.compose.project={self.name}"
        return list(self.client.networks.list(filters={"label": label}))

    def wait_healthy(self, service: str, timeout: float) -> None:
        """Wait until every container of ``service`` reports a healthy healthcheck."""

        def healthy() -> bool:
            found = self.containers(service)
            for c in found:
                c.reload()
            return bool(found) and all(
                c.attrs["State"].get("Health", {}).get("Status") == "healthy" for c in found
            )

        poll(f"{service} to be healthy", healthy, timeout, every=0.5)

    def logs(self) -> str:
        """Every container's log, for a failure report."""
        parts = []
        for c in self.containers():
            try:
                text = c.logs(tail=60).decode(errors="replace")
            except Exception as exc:  # a report must not fail on one container
                text = f"<no log: {exc}>"
            parts.append(f"===== {c.name} ({c.status})\n{text}")
        return "\n".join(parts)
