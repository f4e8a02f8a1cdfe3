"""The deployment files agree with the project, without a Docker engine.

* deploy/requirements.txt (what the image installs) is a subset of pyproject.toml's runtime
  dependencies and extras, with the same version bounds;
* the roles the image runs (``gossip node``, ``gossip coordinator`` and the dashboard) import
  without the dependencies the image leaves out, and the graph quantities of the graphs a
  compose cluster or a LAN of Pis runs are computed without SciPy;
* the shell scripts parse, and the Pi's systemd units pass ``systemd-analyze verify``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PI = DEPLOY / "raspberry-pi"

# Left out of the image on purpose (deploy/requirements.txt says why); narwhals comes with plotly.
LEFT_OUT = ("matplotlib", "amqtt", "scipy", "narwhals", "numba")


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def _image_requirements() -> dict[str, str]:
    lines = (DEPLOY / "requirements.txt").read_text().splitlines()
    reqs = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return {_name(r): r.replace(" ", "") for r in reqs}


def test_image_requirements_are_project_dependencies_with_the_same_bounds() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    runtime = [*project["dependencies"], *extras["sim"], *extras["data"], *extras["plot"]]
    runtime += extras["dashboard"]
    declared = {_name(r): r.replace(" ", "") for r in runtime}
    image = _image_requirements()
    assert image, "deploy/requirements.txt lists nothing"
    for name, requirement in image.items():
        assert name in declared, f"{name} is in deploy/requirements.txt, not in pyproject.toml"
        assert requirement == declared[name], f"bounds differ: {requirement} vs {declared[name]}"
    # Everything the project needs is either in the image or left out on purpose.
    missing = set(declared) - set(image) - set(LEFT_OUT)
    assert not missing, f"pyproject dependencies neither in the image nor left out: {missing}"


_BLOCKER = """
import sys
for name in {left_out!r}:
    sys.modules[name] = None  # 'import name' now raises ImportError, as in the image
sys.argv = ["gossip", *{argv!r}]
from continuized.cli.app import main
main()
"""


@pytest.mark.parametrize("argv", [["node", "--help"], ["coordinator", "--help"], ["--help"]])
def test_the_image_roles_run_without_the_left_out_dependencies(argv: list[str]) -> None:
    code = _BLOCKER.format(left_out=LEFT_OUT, argv=argv)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout


def test_the_coordinator_and_dashboard_modules_import_without_them() -> None:
    code = (
        f"import sys\nfor n in {LEFT_OUT!r}: sys.modules[n] = None\n"
        "import continuized.coordinator.run.service\n"
        "import continuized.coordinator.dashboard.server as s\n"
        "import continuized.node.transport.zeromq\n"
        "assert s.plotly_js_path().is_file()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr


def _run_blocked(argv: list[str]) -> subprocess.CompletedProcess[str]:
    code = _BLOCKER.format(left_out=LEFT_OUT, argv=argv)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_graph_quantities_without_scipy_dense_up_to_the_limit_then_a_clear_error() -> None:
    done = _run_blocked(["graph", "info", "grid:4x4"])
    assert done.returncode == 0, done.stderr
    assert "mu_gossip" in done.stdout
    assert "dense" in done.stdout
    # Above DENSE_LIMIT (1500 nodes) the sparse path needs SciPy: exit 2 with what to install.
    done = _run_blocked(["graph", "info", "grid:40x41"])
    assert done.returncode == 2, done.stdout
    message = " ".join(done.stderr.split())
    assert "1640 nodes > DENSE_LIMIT = 1500" in message
    assert "pip install 'continuized-gossip[sim]'" in message


@pytest.mark.parametrize(
    "script",
    [
        "scripts/docker-engine",
        "scripts/docker-image",
        "deploy/mosquitto/entrypoint.sh",
        "deploy/raspberry-pi/install.sh",
    ],
)
def test_shell_scripts_parse(script: str) -> None:
    shell = "sh" if script.endswith("entrypoint.sh") else "bash"
    done = subprocess.run([shell, "-n", str(ROOT / script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_install_script_refuses_bad_usage_before_touching_anything() -> None:
    script = str(PI / "install.sh")
    for argv, message in [
        ([], "usage: install.sh node|coordinator|broker"),
        (["gateway"], "got 'gateway'"),
        (["node", "--colour", "blue"], "unknown option '--colour'"),
        (["node", "--coordinator"], "--coordinator needs a value"),
    ]:
        done = subprocess.run(["bash", script, *argv], capture_output=True, text=True)
        assert done.returncode == 2, (argv, done.stderr)
        assert message in done.stderr


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None and os.environ.get("CI") != "true",
    reason="systemd-analyze is not installed",
)
def test_pi_systemd_units_verify(tmp_path: Path) -> None:
    # systemd-analyze checks that ExecStart exists: point it at stand-ins for the installed
    # binaries, and keep everything else of each unit as it is shipped.
    stand_in = tmp_path / "bin"
    stand_in.mkdir()
    for binary in ("gossip", "mosquitto"):
        path = stand_in / binary
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    units = []
    for unit in sorted(PI.glob("*.service")):
        text = unit.read_text()
        text = text.replace("/opt/gossip/bin/gossip", str(stand_in / "gossip"))
        text = text.replace("/usr/sbin/mosquitto", str(stand_in / "mosquitto"))
        # The env files exist only on an installed Pi.
        text = re.sub(r"(?m)^EnvironmentFile=", "EnvironmentFile=-", text)
        target = tmp_path / unit.name
        target.write_text(text)
        units.append(str(target))
    assert len(units) == 3
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *units], capture_output=True, text=True
    )
    # Only the unit files themselves may not complain; the host's other units are not ours.
    ours = [line for line in done.stderr.splitlines() if str(tmp_path) in line]
    assert not ours, "\n".join(ours)
