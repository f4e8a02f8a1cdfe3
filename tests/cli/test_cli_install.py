"""``pip install`` of the built wheel into an empty venv, then a secure ``gossip up`` to eps.

What a user of a fresh machine with only Python does: the wheel is built (``pip wheel --no-deps``)
and installed without the dev extras into a new venv; mosquitto is hidden (off the PATH, and
``GOSSIP_MOSQUITTO=none`` for ``/usr/sbin``), so the run's broker is the in-process amqtt. The
run must be secure: while it runs, its broker refuses an anonymous client and admits the
coordinator's credentials (read from the run's key directory).

The dependencies come from PyPI once and are kept in a wheelhouse in pytest's cache
(``.pytest_cache``): pip's own cache keeps nothing on this machine, and numpy, SciPy and numba
take minutes to download. Later runs install from that wheelhouse alone (``--no-index``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import aiomqtt
import pytest

from continuized.gossip.files.keys import COORDINATOR, load_mqtt_secret
from continuized.gossip.wire.access import mqtt_password

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "continuized", "cli", "coordinator", "gossip", "node")
BUILD_REQUIRES = ("setuptools>=68", "wheel")


def _pip(python: Path | str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _from_wheelhouse(
    python: Path | str, house: Path, cwd: Path, args: list[str], needs: list[str]
) -> None:
    """``pip args`` from ``house`` alone; if some of ``needs`` is missing there, fetch it, retry."""
    offline = _pip(python, *args, "--no-index", "--find-links", str(house), cwd=cwd)
    if offline.returncode == 0:
        return
    fetched = _pip(python, "download", "--dest", str(house), *needs, cwd=cwd)
    assert fetched.returncode == 0, fetched.stderr[-3000:]
    again = _pip(python, *args, "--no-index", "--find-links", str(house), cwd=cwd)
    assert again.returncode == 0, again.stderr[-3000:]


def _clean_env(venv: Path) -> dict[str, str]:
    """A user's environment: the venv first, no sbin, no project on PYTHONPATH, no GOSSIP_*."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GOSSIP_", "PYTHON", "VIRTUAL_ENV", "PYTEST"))
    }
    env.update(PATH=f"{venv / 'bin'}:/usr/bin:/bin", GOSSIP_MOSQUITTO="none", COLUMNS="120")
    return env


async def _check_secure_while_running(
    proc: asyncio.subprocess.Process, log_dir: Path
) -> tuple[str, list[str]]:
    """Read stderr up to the broker line; prove the broker refuses anonymous clients then."""
    assert proc.stderr is not None
    lines: list[str] = []
    while True:
        raw = await asyncio.wait_for(proc.stderr.readline(), 120)
        assert raw, f"gossip up ended before its broker started:\n{''.join(lines)}"
        lines.append(raw.decode())
        found = re.search(r"broker mqtt://([\d.]+):(\d+) \((\w+)\); starting", lines[-1])
        if found:
            break
    host, port, kind = found.group(1), int(found.group(2)), found.group(3)
    with pytest.raises(aiomqtt.MqttCodeError) as refused:
        async with aiomqtt.Client(host, port, timeout=10):
            pass
    # The broker answered (CONNACK) and said no, while the run was on.
    assert "Not authorized" in str(refused.value)
    secret = load_mqtt_secret(log_dir / "keys" / COORDINATOR / "mqtt.secret")
    async with aiomqtt.Client(
        host, port, username=COORDINATOR, password=mqtt_password(secret, COORDINATOR), timeout=10
    ):
        pass  # the same broker admits the run's own credentials: it was up all along
    return kind, lines


def _install(tmp_path: Path, house: Path, took: dict[str, float]) -> Path:
    """Build the wheel from a copy of the sources, install it into a new venv; return it.

    ``took`` receives the seconds of each step: ``wheel``, ``venv``, ``install``.
    """
    began = time.monotonic()
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(
                origin, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(origin, src / name)
    dist = tmp_path / "dist"
    _from_wheelhouse(
        sys.executable,
        house,
        tmp_path,
        ["wheel", str(src), "--no-deps", "--wheel-dir", str(dist)],
        list(BUILD_REQUIRES),
    )
    (wheel,) = dist.glob("continuized_gossip-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        tops = {n.split("/")[0] for n in archive.namelist() if ".dist-info/" not in n}
    assert tops == {"continuized"}, f"the wheel installs {sorted(tops)}, not one name"
    took["wheel"] = time.monotonic() - began
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    took["venv"] = time.monotonic() - began - took["wheel"]
    python = venv / "bin" / "python"
    # --no-compile: pip's bytecode of numpy, SciPy and numba (most of the install's time) is
    # not what this checks; Python compiles what the run imports.
    _from_wheelhouse(python, house, tmp_path, ["install", "--no-compile", str(wheel)], [str(wheel)])
    took["install"] = time.monotonic() - began - took["wheel"] - took["venv"]
    where = subprocess.run(
        [str(python), "-c", "from continuized import cli; import importlib.util as u\n"
         "print(cli.__file__, u.find_spec('pytest') is None)"],
        cwd=tmp_path, env=_clean_env(venv), capture_output=True, text=True, check=True,
    )  # fmt: skip
    cli_file, no_pytest = where.stdout.split()
    assert Path(cli_file).is_relative_to(venv)  # the installed copy, not this checkout
    assert no_pytest == "True"  # no dev extras
    return venv


async def test_the_built_wheel_runs_gossip_up_secure_without_mosquitto(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    house = request.config.cache.mkdir("gossip-wheelhouse")
    took: dict[str, float] = {}
    venv = await asyncio.to_thread(_install, tmp_path, house, took)
    env = _clean_env(venv)
    assert shutil.which("mosquitto", path=env["PATH"]) is None

    log_dir = tmp_path / "logs"
    run_began = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        str(venv / "bin" / "gossip"),
        "up",
        "--quiet",
        "--json",
        "run.json",
        "--log-dir",
        str(log_dir),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        kind, lines = await _check_secure_while_running(proc, log_dir)
        out, err = await asyncio.wait_for(proc.communicate(), 300)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    ran = time.monotonic() - run_began
    stderr = "".join(lines) + err.decode()
    assert proc.returncode == 0, stderr
    assert kind == "amqtt"
    assert "INSECURE" not in stderr
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["reached"] is True, record
    assert "reached eps" in out.decode()
    # Measured figures for the docs (pytest -s shows them).
    steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in took.items())
    print(f"\n{steps}; gossip up to eps (exit): {ran:.1f} s")
