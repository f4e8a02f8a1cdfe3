"""The batch commands' progress bar: one bar per name, labelled on its first report; the line
above it when a kernel compiles."""

from __future__ import annotations

import pytest

from continuized.cli._progress import compiling_line, progress_bar


def test_one_bar_per_name_labelled_on_its_first_report() -> None:
    labels: list[str] = []

    def describe(name: str) -> str:
        labels.append(name)
        return f"{name}: 3 runs"

    with progress_bar(False, describe) as report:
        report("rg", 0, 30)
        report("rg", 10, 30)
        report("arg", 5, 30)
        report("rg", 30, 30)
    assert labels == ["rg", "arg"]


def test_a_cold_kernel_is_said_to_compile_once_above_the_bar(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with progress_bar(True, compiling="the simulator's kernel") as report:
        report("rg", 0, 10)
    assert capsys.readouterr().err.splitlines()[0] == compiling_line("the simulator's kernel")
    assert "(once" in compiling_line("x")
    with progress_bar(True) as report:  # a warm cache: not a word
        report("rg", 0, 10)
    with progress_bar(False, compiling="the simulator's kernel") as report:  # --no-progress
        report("rg", 0, 10)
    assert "compiling" not in capsys.readouterr().err
