"""Output paths checked without creating anything, and a result kept when its file cannot be."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from continuized.gossip.errors import ConfigError
from continuized.gossip.files.destinations import (
    check_dir_destination,
    check_file_destination,
    keep_result,
    unwritten,
)


def test_a_file_in_a_missing_directory_is_fine_and_nothing_is_created(tmp_path: Path) -> None:
    target = tmp_path / "new" / "dir" / "f.png"
    assert check_file_destination("--plot", target, (".png",)) == target
    assert list(tmp_path.iterdir()) == []  # the check tried the disk, and left nothing


def test_a_directory_where_a_file_is_expected_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--json '.*' is a directory; give a file name"):
        check_file_destination("--json", tmp_path)


def test_a_suffix_outside_the_valid_ones_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--plot '.*f\.gif' has suffix '\.gif'; valid: \.png"):
        check_file_destination("--plot", tmp_path / "f.gif", (".png",))


@pytest.mark.parametrize("depth", [("x.json",), ("sub", "deeper", "x.json")])
def test_a_file_where_a_directory_must_be_is_named(tmp_path: Path, depth: tuple[str, ...]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    target = afile.joinpath(*depth)
    with pytest.raises(ConfigError) as caught:
        check_file_destination("--json", target)
    message = str(caught.value)
    assert message.startswith(f"--json {str(target)!r}: {str(afile)!r} exists and is not a")
    assert "choose another path" in message


def test_a_directory_nothing_can_be_created_in_is_refused() -> None:
    # /proc takes no new entry, even for root (for whom os.access says yes).
    with pytest.raises(ConfigError, match=r"--json '/proc/x\.json': cannot write into '/proc'"):
        check_file_destination("--json", Path("/proc/x.json"))


def test_a_directory_destination(tmp_path: Path) -> None:
    assert check_dir_destination("--out", tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert check_dir_destination("--out", tmp_path) == tmp_path
    assert list(tmp_path.iterdir()) == []
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ConfigError, match=r"--out '.*afile' exists and is not a directory"):
        check_dir_destination("--out", afile)
    with pytest.raises(ConfigError, match=r"--dir '.*afile/k': '.*afile' exists and is not"):
        check_dir_destination("--dir", afile / "k")


def test_a_result_is_kept_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = keep_result("simulate", {"t_eps": 1.5, "bad": float("nan")})
    assert path is not None
    assert path.parent == Path(".")
    assert path.name.startswith("gossip-simulate-")
    assert path.suffix == ".json"
    assert json.loads(path.read_text()) == {"t_eps": 1.5, "bad": None}


def test_a_result_goes_to_the_temporary_directory_when_the_working_one_takes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    os.rmdir(gone)  # the working directory was removed during the run
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    path = keep_result("up", {"reached": True})
    assert path is not None
    assert path.parent == temp
    assert json.loads(path.read_text()) == {"reached": True}


def test_an_unwritten_output_is_one_phrase(tmp_path: Path) -> None:
    error = FileNotFoundError(2, "No such file or directory")
    phrase = unwritten("--csv", tmp_path / "c.csv", error)
    assert phrase == f"--csv {str(tmp_path / 'c.csv')!r} (No such file or directory)"


def test_a_directory_replaced_by_a_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "d").write_text("")
    with pytest.raises(FileExistsError) as caught:
        (tmp_path / "d").mkdir(parents=True, exist_ok=True)
    phrase = unwritten("--json", tmp_path / "d" / "x.json", caught.value)
    assert phrase.endswith(f"({str(tmp_path / 'd')!r} exists and is not a directory)")
