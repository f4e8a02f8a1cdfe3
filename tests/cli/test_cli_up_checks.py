"""``gossip up``: every setting checked before anything starts; user data printed verbatim.

These runs fail before any broker or node would start, so they are quick: each is a real
``gossip up`` subprocess whose temporary directory (``TMPDIR``) and working directory are the
test's, so anything it started or wrote would be seen there.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

GOSSIP = [sys.executable, "-m", "continuized.cli.app"]

# A bad line that rich markup would eat ([bold]) and emoji codes would turn into a cross (:x:).
BAD_LINE = "root:x:0:0:[bold]root[/bold]:/root"


def _run(args: list[str], tmp_path: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    env.update(TMPDIR=str(tmp), COLUMNS="200", **extra_env)
    return subprocess.run(
        [*GOSSIP, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _values_file(tmp_path: Path) -> Path:
    path = tmp_path / "values.txt"
    path.write_text(f"1.0\n{BAD_LINE}\n0.0\n0.0\n")
    return path


BAD_SETTINGS = [
    (["--rate", "-1"], "--rate"),
    (["--rate", "nan"], "--rate"),
    (["--until", "0"], "--until"),
    (["--graph", "blob:3"], "blob:3"),
    (["--algorithm", "fast"], "fast"),
    (["--dim", "0"], "--dim"),
    (["--metrics-period", "0"], "--metrics-period"),
    (["--timeout", "-5"], "--timeout"),
    (["--values", "file:missing.txt"], "missing.txt"),
    (["--values", "sparkly"], "sparkly"),
    (["--cluster", "a/b"], "--cluster"),
    (["--dashboard-port", "70000"], "--dashboard-port"),
    (["--embedded-broker", "rabbit"], "rabbit"),
    (["--broker", "http://127.0.0.1:1883"], "http://127.0.0.1:1883"),
    (["--hold", "soon"], "--hold"),
    (["--node-arg=--no-such-option"], "--no-such-option"),
    (["--node-arg=--fault", "--node-arg=drop=2"], "drop"),
]


@pytest.mark.parametrize(
    ("args", "named"), BAD_SETTINGS, ids=[" ".join(a) for a, _ in BAD_SETTINGS]
)
def test_a_bad_setting_starts_nothing_and_writes_nothing(
    args: list[str], named: str, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    result = _run(
        [
            "up",
            "--graph",
            "line:4",
            "--quiet",
            "--log-dir",
            str(logs),
            "--metrics-file",
            "m.jsonl",
            "--json",
            "r.json",
            "--dashboard-runs-dir",
            "runs",
            *args,
        ],
        tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert "error:" in result.stderr
    assert named in result.stderr
    assert "starting" not in result.stderr  # the line gossip up prints once its broker is up
    # Nothing written: no log directory, no metrics or run files, nothing in TMPDIR (where the
    # embedded mosquitto keeps its configuration and a default log directory would go).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]
    assert list((tmp_path / "tmp").iterdir()) == []
    # And no process left behind that was started for this run.
    for proc in psutil.process_iter(["cmdline"]):
        assert str(tmp_path) not in " ".join(proc.info["cmdline"] or ())


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed: connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_broker_url_that_refuses_is_named_at_once_and_nothing_is_drawn(
    tmp_path: Path,
) -> None:
    url = f"mqtt://127.0.0.1:{_closed_port()}"
    began = time.monotonic()
    # No --quiet: the progress bar would be drawn if the run got that far.
    result = _run(["up", "--graph", "line:4", "--broker", url], tmp_path)
    elapsed = time.monotonic() - began
    assert result.returncode == 2, result.stderr
    assert f"--broker {url}: nothing accepts connections" in result.stderr
    assert "connection refused" in result.stderr
    # A refused connection on loopback is final: no 10 s of retries (it once took 10.6 s).
    assert elapsed < 8.0, f"{elapsed:.1f} s to report a refused --broker"
    # The error alone: no status line, progress bar or failure table before it.
    assert result.stdout == ""
    assert result.stderr.startswith("error: --broker"), result.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize(
    ("mosquitto", "args", "named"),
    [
        (
            "none",
            ["--embedded-broker", "mosquitto"],
            "--embedded-broker mosquitto: GOSSIP_MOSQUITTO=none hides",
        ),
        ("/no/such/mosquitto", [], "GOSSIP_MOSQUITTO='/no/such/mosquitto' is not an executable"),
    ],
    ids=["hidden", "bad-path"],
)
def test_a_missing_mosquitto_is_named_before_anything_starts(
    mosquitto: str, args: list[str], named: str, tmp_path: Path
) -> None:
    result = _run(["up", "--graph", "line:4", *args], tmp_path, GOSSIP_MOSQUITTO=mosquitto)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: {named}"), result.stderr
    assert "apt-get" not in result.stderr  # the user chose this; installing is not the fix
    assert result.stdout == ""
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_bad_values_line_is_quoted_verbatim(tmp_path: Path) -> None:
    values = _values_file(tmp_path)
    result = _run(["up", "--graph", "line:4", "--quiet", "--values", f"file:{values}"], tmp_path)
    assert result.returncode == 2
    assert BAD_LINE in result.stderr, result.stderr
    assert "\N{CROSS MARK}" not in result.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_bad_topology_line_is_quoted_verbatim(tmp_path: Path) -> None:
    topo = tmp_path / "topo.txt"
    topo.write_text(f"0 1\n{BAD_LINE}\n")
    result = _run(["graph", "info", f"file:{topo}"], tmp_path)
    assert result.returncode == 2
    assert BAD_LINE in result.stderr, result.stderr
    assert "\N{CROSS MARK}" not in result.stderr


def test_a_graph_spec_in_a_table_title_is_printed_verbatim(tmp_path: Path) -> None:
    topo = tmp_path / "a:x:[bold]b.txt"
    topo.write_text("0 1\n1 2\n")
    result = _run(["graph", "info", f"file:{topo}"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "a:x:[bold]b.txt" in result.stdout.replace("\n", "")


def test_an_eps_below_the_float_floor_of_the_values_is_warned_about(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from continuized.cli.up_cmd import _warn_below_float_floor
    from continuized.gossip.model.values import error_floor, initial_values

    onehot = initial_values("onehot", 9)
    floor = error_floor(onehot)
    assert floor == 0.5 * 2.0**-104  # half the square of ulp(1) = 2^-52
    _warn_below_float_floor(1e-300, onehot)
    warned = capsys.readouterr().err
    assert "--until 1e-300 is below" in warned
    assert f"{floor:.3g}" in warned
    _warn_below_float_floor(1e-6, onehot)
    _warn_below_float_floor(1e-300, None)  # values come from the nodes: nothing to judge
    assert capsys.readouterr().err == ""
