"""Turn the exception groups of ``asyncio.TaskGroup`` back into the one error that matters."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from continuized.gossip.errors import GossipError

__all__ = ["leaves", "single_error"]


def leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    """Yield the non-group exceptions inside ``group``, depth first."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from leaves(exc)
        else:
            yield exc


@contextmanager
def single_error() -> Iterator[None]:
    """Re-raise a task group's first :class:`GossipError` (or KeyboardInterrupt) on its own.

    A task group wraps the error of any of its tasks in an ExceptionGroup; callers of the
    coordinator (and the CLI's ``reported_errors``) expect the project's own error, whose
    message says what went wrong. Groups holding anything else are re-raised unchanged.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        found = list(leaves(group))
        for kind in (KeyboardInterrupt, GossipError):
            for exc in found:
                if isinstance(exc, kind):
                    raise exc from None
        raise
