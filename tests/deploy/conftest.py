"""Fixtures of the deployment tests: a Docker engine, the image, and Compose projects.

The Docker tests drive the real thing: scripts/docker-engine installs and starts dockerd when
it is missing (as root), scripts/docker-image bootstraps a Debian base and builds the image
from a host-built wheelhouse (no registry is reachable here), and Compose runs the project's
docker-compose.yml. Without an engine (and not root) they skip, except under CI=true, where
they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import (
    ARM64_BASE,
    ARM64_IMAGE,
    BASE_IMAGE,
    FIGURES,
    IMAGE,
    ROOT,
    ComposeProject,
    free_port,
    image_exists,
    run,
    unavailable,
)


@pytest.fixture(scope="session")
def docker_client() -> Any:
    """A docker SDK client on a running engine (started by scripts/docker-engine if need be)."""
    if shutil.which("docker") is None and os.geteuid() != 0:
        unavailable("no docker CLI and not root to install docker.io")
    engine = subprocess.run(
        ["bash", "scripts/docker-engine"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    if engine.returncode != 0:
        unavailable(f"no Docker engine: {engine.stderr.strip()[-500:]}")
    import docker  # type: ignore[import-untyped]

    client = docker.from_env(timeout=120)
    client.ping()
    return client


@pytest.fixture(scope="session")
def gossip_image(docker_client: Any) -> str:
    """The project's image, built by scripts/docker-image on the bootstrapped Debian base."""
    started = time.monotonic()
    base_cached = image_exists(docker_client, BASE_IMAGE)
    run(
        ["bash", "scripts/docker-image", "--base", BASE_IMAGE, "--tag", IMAGE],
        timeout=900,
    )
    image = docker_client.images.get(IMAGE)
    FIGURES["image_build_s"] = round(time.monotonic() - started, 1)
    FIGURES["base_image_was_cached"] = base_cached
    FIGURES["image_size_mb"] = round(image.attrs["Size"] / 1e6, 1)
    FIGURES["base_image_size_mb"] = round(
        docker_client.images.get(BASE_IMAGE).attrs["Size"] / 1e6, 1
    )
    return IMAGE


@pytest.fixture(scope="session")
def arm64_image(docker_client: Any, project_wheel: Path) -> str:
    """The arm64 image, built by scripts/docker-image under emulation (the base is cached) from
    the session's project wheel (built natively, as the Pi test installs it); the build also
    leaves the arm64 base and its wheelhouse, .wheelhouse-arm64/."""
    # Emulation is a capability of the host, like the engine: without it (not root, no
    # binfmt_misc) the test skips, except under CI=true, where it fails.
    emulation = subprocess.run(
        ["bash", "scripts/qemu-binfmt", "arm64"], cwd=ROOT, capture_output=True, text=True
    )
    if emulation.returncode != 0:
        unavailable(f"no arm64 emulation: {emulation.stderr.strip()[-500:]}")
    started = time.monotonic()
    base_cached = image_exists(docker_client, ARM64_BASE)
    build = ["bash", "scripts/docker-image", "--platform", "linux/arm64", "--tag", ARM64_IMAGE]
    run([*build, "--wheel", str(project_wheel)], timeout=1200)
    image = docker_client.images.get(ARM64_IMAGE)
    FIGURES["arm64_image_build_s"] = round(time.monotonic() - started, 1)
    FIGURES["arm64_base_image_was_cached"] = base_cached
    FIGURES["arm64_image_size_mb"] = round(image.attrs["Size"] / 1e6, 1)
    FIGURES["arm64_base_image_size_mb"] = round(
        docker_client.images.get(ARM64_BASE).attrs["Size"] / 1e6, 1
    )
    return ARM64_IMAGE


@pytest.fixture(scope="session")
def project_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built once per session on the host as the Pi playbook's controller
    builds it (``pip wheel --no-deps``). It is pure Python, so the one wheel installs on arm64
    too: a container under qemu installs it instead of building the checkout under emulation.

    The build runs on a copy of the packages, so that no stale ``build/`` of the checkout can
    slip a deleted module into the wheel.
    """
    started = time.monotonic()
    source = tmp_path_factory.mktemp("project-source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    # continuized/ links to the four folders: copied as links, they point into the copy.
    for package in ("continuized", "gossip", "node", "coordinator", "cli"):
        shutil.copytree(
            ROOT / package,
            source / package,
            symlinks=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    out = tmp_path_factory.mktemp("project-wheel")
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
         "--disable-pip-version-check", "--wheel-dir", str(out), str(source)],
        timeout=600,
        # Reproducible: the same sources give the same bytes, so an image built from the wheel
        # keeps its cached layers from one session to the next.
        env={**os.environ, "SOURCE_DATE_EPOCH": "315532800"},
    )  # fmt: skip
    wheels = sorted(out.glob("continuized_gossip-*.whl"))
    assert len(wheels) == 1, wheels
    # Pure Python (py3-none-any): the premise of installing it on another architecture.
    assert wheels[0].name.endswith("-py3-none-any.whl"), wheels[0].name
    FIGURES["project_wheel_build_s"] = round(time.monotonic() - started, 1)
    return wheels[0]


@pytest.fixture
def compose_project(
    docker_client: Any, gossip_image: str, request: pytest.FixtureRequest
) -> Iterator[ComposeProject]:
    """A Compose project named after the test; its logs are printed if the test fails, and
    ``down`` must leave no container and no network behind."""
    name = f"gossiptest{os.getpid()}{request.node.name[-12:].lower()}"
    name = "".join(ch for ch in name if ch.isalnum())
    project = ComposeProject(
        docker_client,
        name,
        env={
            "GOSSIP_IMAGE": gossip_image,
            # No registry here: the bootstrapped base has mosquitto and mosquitto_passwd.
            "GOSSIP_MOSQUITTO_IMAGE": BASE_IMAGE,
            "GOSSIP_DASHBOARD_PUBLISH": str(free_port()),
        },
    )
    failed_before = request.session.testsfailed
    try:
        yield project
    finally:
        if request.session.testsfailed > failed_before:
            print(project.logs())
        project.compose("down", "--volumes", "--remove-orphans", "--timeout", "10")
        leftovers = [c.name for c in project.containers()] + [n.name for n in project.networks()]
        assert not leftovers, f"compose down left {leftovers}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Print the measured figures (image size, start-up and convergence times)."""
    if FIGURES:
        out = ROOT / "artifacts"
        out.mkdir(exist_ok=True)
        (out / "deploy-figures.json").write_text(json.dumps(FIGURES, indent=2) + "\n")
        print(f"\ndeploy figures: {json.dumps(FIGURES)}")
