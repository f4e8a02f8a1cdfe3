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
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PI = DEPLOY / "raspberry-pi"

# Left out of the lean image on purpose (deploy/requirements.txt says why), as requirement
# names, and the modules they (and the pruned narwhals, which comes with plotly) import.
LEFT_OUT = ("matplotlib", "amqtt", "scipy", "numba", "scikit-learn")
BLOCKED = ("matplotlib", "amqtt", "scipy", "numba", "sklearn", "narwhals")


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
    code = _BLOCKER.format(left_out=BLOCKED, argv=argv)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout


def test_the_coordinator_and_dashboard_modules_import_without_them() -> None:
    code = (
        f"import sys\nfor n in {BLOCKED!r}: sys.modules[n] = None\n"
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
    code = _BLOCKER.format(left_out=BLOCKED, argv=argv)
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


def test_an_optimization_run_without_the_extras_stops_in_one_line() -> None:
    # What the lean image and a lean Pi do with GOSSIP_PROBLEM: exit 2 naming the extra.
    done = _run_blocked(["coordinator", "--graph", "cycle:3", "--problem", "logistic:0.01"])
    assert done.returncode == 2, done.stdout
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "pip install 'continuized-gossip[sim]'" in done.stderr


def _extras(source: Path, extras: str) -> subprocess.CompletedProcess[str]:
    script = DEPLOY / "extras_requirements.py"
    argv = [sys.executable, str(script), str(source), extras]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_extras_requirements_expand_the_extras_of_pyproject() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = declared["optional-dependencies"]
    done = _extras(ROOT / "pyproject.toml", "sim,data")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [*extras["sim"], *extras["data"]]
    # `all` names the others: expanded, each requirement once, and never the core (amqtt).
    everything = _extras(ROOT / "pyproject.toml", "all,sim").stdout.splitlines()
    named = [*extras["sim"], *extras["data"], *extras["plot"], *extras["dashboard"]]
    assert sorted(everything) == sorted(named)
    assert not any(_name(r) == "amqtt" for r in everything)
    assert _extras(ROOT / "pyproject.toml", "").stdout.strip() == ""
    bad = _extras(ROOT / "pyproject.toml", "sim,nope")
    assert bad.returncode != 0
    assert "no extra 'nope'" in bad.stderr


def test_extras_requirements_read_a_wheels_metadata(tmp_path: Path) -> None:
    # A Pi may get only the wheel (the playbook): its METADATA as setuptools writes it.
    wheel = tmp_path / "continuized_gossip-0.1.0-py3-none-any.whl"
    metadata = "\n".join(
        [
            "Metadata-Version: 2.1",
            "Name: continuized-gossip",
            "Requires-Dist: numpy>=1.26",
            "Provides-Extra: sim",
            'Requires-Dist: scipy>=1.11; extra == "sim"',
            'Requires-Dist: numba>=0.59; extra == "sim"',
            "Provides-Extra: data",
            'Requires-Dist: scikit-learn>=1.3; extra == "data"',
            "Provides-Extra: all",
            'Requires-Dist: continuized-gossip[data,sim]; extra == "all"',
        ]
    )
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("continuized_gossip-0.1.0.dist-info/METADATA", metadata)
    done = _extras(wheel, "all")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["scikit-learn>=1.3", "scipy>=1.11", "numba>=0.59"]


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
