"""The progress bar of the batch commands: one rich bar on stderr per task, or nothing.

``simulate``, ``optimize``, ``train`` and the ``reproduce`` commands report ``(name, done,
total)`` as their runs advance; :func:`progress_bar` draws one bar per name, made on its first
report and gone when the command ends, so that the tables printed afterwards stand alone.
A command whose first run compiles a numba kernel says so in one line above its bar
(``compiling=``): the bar stays at 0% while numba compiles, once, and nothing else would say why.
(A live run's bar, which follows the reports of the nodes, is :mod:`cli._cluster_view`'s.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Report", "compiling_line", "progress_bar"]

Report = Callable[[str, float, float], None]
"""``report(name, done, total)``: move the bar of ``name`` to ``done`` of ``total``."""


def _same(name: str) -> str:
    return name


@contextmanager
def progress_bar(
    enabled: bool, describe: Callable[[str], str] = _same, compiling: str | None = None
) -> Iterator[Report]:
    """Yield a :data:`Report` drawing one bar per name, labelled ``describe(name)``.

    ``compiling`` names what the command is about to compile (numba's cache is cold for it,
    e.g. :func:`gossip.sim.compiled.kernel_compiles`): :func:`compiling_line` is printed first.
    Disabled (``--no-progress``), the reports are taken and nothing is drawn or printed.
    """
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not enabled,
        transient=True,
    )
    tasks: dict[str, Any] = {}

    def report(name: str, done: float, total: float) -> None:
        task = tasks.get(name)
        if task is None:
            task = tasks[name] = bar.add_task(describe(name), total=total)
        bar.update(task, completed=done, total=total)

    with bar:
        if enabled and compiling is not None:
            bar.console.print(compiling_line(compiling), highlight=False)
        yield report


def compiling_line(what: str) -> str:
    """The line saying that ``what`` compiles now, once (no duration: it was not measured)."""
    return f"compiling {what} (once; numba caches it)"
