"""Every runnable block of the guide runs as written (docs/contributing.md: the convention).

The blocks of a page run in order in one fresh directory, with ``gossip`` resolved as
``python -P -m continuized.cli.app`` of this checkout (``-P`` as the console script: the current
folder is not on the import path), so a block may use what an earlier block of its page wrote.
The directory stands for the repository's root, where the docs run the examples from: it holds
a copy of ``examples/``, and only the ``continuized`` package is put on the import path (not the
checkout's other top-level folders, which would make ``examples`` importable from anywhere).
A block that exits non-zero, or outlives its time limit, fails with its output.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _doc_blocks import PAGES, ROOT, Block, MarkerError, all_blocks, blocks_of

# A shell function, not an installed script: the blocks must test this tree.
_PREAMBLE = 'gossip() { "$GOSSIP_DOCS_PYTHON" -P -m continuized.cli.app "$@"; }\n'
_LIMIT_S = {False: 240.0, True: 600.0}


def _params() -> list[object]:
    params: list[object] = []
    for block in all_blocks():
        marks = [pytest.mark.slow] if block.slow else []
        if block.solo:
            marks.append(pytest.mark.solo)
        if "gossip up" in block.code or "gossip node" in block.code:
            marks.append(pytest.mark.cluster)
        params.append(pytest.param(block, id=block.name, marks=marks))
    return params


@pytest.fixture(scope="session")
def workdirs() -> dict[str, Path]:
    """One directory per page, shared by that page's blocks (created on first use).

    Session-wide: a module's fixtures are set up again whenever a worker comes back to the
    module after another's tests, and a page's later blocks read what its earlier ones wrote.
    """
    return {}


@pytest.fixture(scope="session")
def import_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding only a link to this checkout's ``continuized`` package."""
    root = tmp_path_factory.mktemp("import-root")
    (root / "continuized").symlink_to(ROOT / "continuized", target_is_directory=True)
    return root


def _workdir(page: str, factory: pytest.TempPathFactory) -> Path:
    """A fresh stand-in for the repository's root: a copy of ``examples/``, nothing else."""
    cwd = factory.mktemp(f"doc-{page}")
    shutil.copytree(ROOT / "examples", cwd / "examples")
    return cwd


def _environment(import_root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["GOSSIP_DOCS_PYTHON"] = sys.executable
    # This checkout's package first, whatever is installed; nothing else of the checkout.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(import_root), env.get("PYTHONPATH", "")) if p
    )
    # `python` in a block is this interpreter (the venv's), whatever PATH said before.
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env["COLUMNS"] = "160"  # rich's tables: wide enough that a figure is never cut
    env.setdefault("NO_COLOR", "1")
    return env


def _run(block: Block, cwd: Path, import_root: Path) -> subprocess.CompletedProcess[str]:
    if block.lang == "bash":
        argv = ["bash", "-eo", "pipefail", "-c", _PREAMBLE + block.code]
    else:
        argv = [sys.executable, "-c", block.code]
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=_environment(import_root),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: whatever it left running goes with it
    )
    try:
        out, err = proc.communicate(timeout=_LIMIT_S[block.slow])
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, err = proc.communicate()
        return subprocess.CompletedProcess(argv, -9, out, err + "\n[timed out]")
    finally:
        _kill_group(proc.pid)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _kill_group(pgid: int) -> None:
    """End the block's process group (background jobs a failed block left behind)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


@pytest.mark.parametrize("block", _params())
def test_the_block_runs_as_written(
    block: Block,
    workdirs: dict[str, Path],
    import_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    if block.page not in workdirs:
        workdirs[block.page] = _workdir(block.page, tmp_path_factory)
    done = _run(block, workdirs[block.page], import_root)
    assert done.returncode == 0, (
        f"{block.name} (line {block.line}) exited {done.returncode}:\n{block.code}\n"
        f"--- stdout\n{_tail(done.stdout)}\n--- stderr\n{_tail(done.stderr)}"
    )


def test_every_marker_is_well_formed() -> None:
    problems: list[str] = []
    for path in PAGES:
        try:
            blocks_of(path)
        except MarkerError as exc:
            problems.append(str(exc))
    assert not problems, "\n".join(problems)


def test_the_tutorial_runs_all_its_blocks() -> None:
    text = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")
    runnable = blocks_of(ROOT / "docs" / "tutorial.md")
    # Every bash or python block but the install line (which needs the network) is marked.
    fenced = sum(text.count(f"```{lang}\n") for lang in ("bash", "python"))
    assert len(runnable) == fenced - 1, (len(runnable), fenced)
