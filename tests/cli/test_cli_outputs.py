"""Every output path checked before any work starts, and a finished result never lost.

A bad path is one ``error:`` line naming the option, the path and the fix, exit code 2, and
nothing started: no simulation (no summary printed), no broker or node (``gossip up`` prints
``starting`` once its broker is up), nothing written. A write that fails at the end anyway
leaves the summary printed, the result in a fallback file named on stderr, and exit code 3.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from continuized.cli._saving import OUTPUT_FAILED
from continuized.cli.app import app

GOSSIP = [sys.executable, "-P", "-m", "continuized.cli.app"]
runner = CliRunner()


def _env(tmp_path: Path) -> dict[str, str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOSSIP_")}
    env.update(TMPDIR=str(tmp), COLUMNS="300")
    return env


def _gossip(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """A real ``gossip`` process in ``tmp_path``; ``timeout`` is only a safety net."""
    return subprocess.run(
        [*GOSSIP, *args],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def afile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An existing regular file, in the test's working directory."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "afile"
    path.write_text("not a directory\n")
    return path


def _one_error_line(stderr: str, option: str, path: str) -> str:
    # A warning may come first (gossip coordinator without --keys); then the error alone.
    lines = [x for x in stderr.splitlines() if x.strip() and not x.startswith("warning:")]
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith(f"error: {option} {path!r}"), line
    return line


UP_BAD_PATHS = [
    ("--json", "afile/x.json"),
    ("--metrics-file", "afile/m.csv"),
    ("--log-dir", "afile/logs"),
]


@pytest.mark.parametrize(("option", "path"), UP_BAD_PATHS, ids=[o for o, _ in UP_BAD_PATHS])
def test_up_with_a_file_for_a_directory_starts_nothing(
    option: str, path: str, afile: Path, tmp_path: Path
) -> None:
    result = _gossip(["up", "--graph", "line:3", option, path], tmp_path)
    assert result.returncode == 2, result.stderr
    line = _one_error_line(result.stderr, option, path)
    assert "'afile' exists and is not a directory" in " ".join(line.split())
    assert "starting" not in result.stderr  # no broker came up, so no node either
    assert result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "tmp"]
    assert list((tmp_path / "tmp").iterdir()) == []  # no broker config, no node logs


def test_coordinator_with_a_bad_json_path_binds_nothing(afile: Path, tmp_path: Path) -> None:
    result = _gossip(
        ["coordinator", "--graph", "line:3", "--json", "afile/x.json", "--bind",
         "tcp://127.0.0.1:1"],
        tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    _one_error_line(result.stderr, "--json", "afile/x.json")
    assert "registration on" not in result.stderr


def test_submit_with_a_bad_json_path_sends_nothing(afile: Path, tmp_path: Path) -> None:
    # A broker nothing listens on: reaching it would be a different error.
    result = _gossip(
        ["submit", "--broker", "mqtt://127.0.0.1:1", "--json", "afile/x.json"], tmp_path
    )
    assert result.returncode == 2, result.stderr
    _one_error_line(result.stderr, "--json", "afile/x.json")


def _invoke(args: list[str]) -> Any:
    return runner.invoke(app, args)


def test_simulate_into_proc_computes_nothing(tmp_path: Path) -> None:
    result = _invoke(
        ["simulate", "--graph", "line:3", "--runs", "2", "--no-progress", "--json",
         "/proc/x.json"]
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    line = _one_error_line(result.output, "--json", "/proc/x.json")
    assert "cannot write into '/proc'" in line
    assert "theta" not in result.output  # no summary: nothing was simulated


def test_keys_init_into_a_file_writes_no_key(afile: Path) -> None:
    result = _invoke(["keys", "init", "--dir", "afile/k", "--nodes", "2"])
    assert result.exit_code == 2, result.output
    _one_error_line(result.output, "--dir", "afile/k")
    assert afile.read_text() == "not a directory\n"


BATCH_BAD_PATHS = [
    (["simulate", "--graph", "line:3", "--runs", "2"], "--csv", "afile/c.csv"),
    (["simulate", "--graph", "line:3", "--runs", "2"], "--plot", "afile/p.png"),
    (["optimize", "--graph", "line:3", "--runs", "2"], "--json", "afile/o.json"),
    (["train", "--graph", "line:3", "--runs", "2"], "--csv", "afile/t.csv"),
    (["reproduce", "gossip-figure", "--runs", "2"], "--out", "afile/figures"),
    (["reproduce", "optimization-figure", "--runs", "2"], "--out", "afile/figures"),
    (["reproduce", "training-figure", "--runs", "2"], "--out", "afile/figures"),
    (["reproduce", "optim-figure", "--runs", "2"], "--out", "afile/figures"),
]


@pytest.mark.parametrize(
    ("command", "option", "path"),
    BATCH_BAD_PATHS,
    ids=[f"{' '.join(c[:2])} {o}" for c, o, _ in BATCH_BAD_PATHS],
)
def test_a_batch_command_with_a_bad_output_path_computes_nothing(
    command: list[str], option: str, path: str, afile: Path, tmp_path: Path
) -> None:
    result = _invoke([*command, "--no-progress", option, path] if "optim-figure" not in command
                     else [*command, option, path])  # fmt: skip
    assert result.exit_code == 2, result.output
    _one_error_line(result.output, option, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_simulation_whose_json_cannot_be_written_keeps_its_result(
    afile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(path: Path, data: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr("continuized.gossip.files.outputs.write_json", disk_full)
    result = _invoke(
        ["simulate", "--graph", "line:3", "--runs", "4", "--no-progress", "--json", "out/s.json",
         "--csv", "out/s.csv"]
    )  # fmt: skip
    assert result.exit_code == OUTPUT_FAILED, result.output
    assert "theta" in result.output  # the summary is still printed
    assert "wrote out/s.csv" in result.output  # what could be written was
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert "could not write --json 'out/s.json' (No space left on device)" in errors[0]
    kept = sorted(tmp_path.glob("gossip-simulate-*.json"))
    assert len(kept) == 1
    assert f"the result is kept in {kept[0].name}" in errors[0]
    summary = json.loads(kept[0].read_text())
    assert summary["graph"] == "line:3"
    assert set(summary["algorithms"]) == {"rg", "arg"}


@pytest.mark.cluster
def test_a_live_run_whose_json_directory_vanishes_keeps_its_result(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        [*GOSSIP, "up", "--graph", "line:3", "--rate", "200", "--until", "1e-4", "--quiet",
         "--json", "out/run.json", "--metrics-file", "m.jsonl", "--timeout", "60"],
        cwd=tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # the checks passed and the broker is up: take the directory away
        seen.append(line)
        if "starting" in line:
            break
    out.rmdir()
    out.write_text("now a file\n")
    stdout, stderr = proc.communicate(timeout=180)  # a safety net, not a deadline
    stderr = "".join(seen) + stderr
    assert proc.returncode == OUTPUT_FAILED, stderr
    assert "Traceback" not in stderr
    assert "ExceptionGroup" not in stderr + stdout
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    assert errors[0].startswith(
        "error: could not write --json 'out/run.json' ('out' exists and is not a directory)"
    ), errors[0]
    kept = sorted(tmp_path.glob("gossip-up-*.json"))
    assert len(kept) == 1
    assert str(kept[0].name) in errors[0]
    record = json.loads(kept[0].read_text())
    assert record["reached"] is True
    assert record["failure"] is None
    assert "failure" not in stdout.lower() or "failure: none" in stdout.lower()
    # The metrics file was unharmed: its run ended with the final record.
    finals = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert finals[-1]["kind"] == "final"
    assert finals[-1]["reached"] is True
