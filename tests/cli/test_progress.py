"""The batch commands' progress bar: one bar per name, labelled on its first report."""

from __future__ import annotations

from continuized.cli._progress import progress_bar


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
