"""Bounded curves in memory: a long run keeps its old points thinned (pure).

A run under ``--keep-running`` (a standing deployment) adds an estimated point every metrics
period (ten a second by default) and an exact point at every grid time, for as long as it runs.
Kept whole, its curves alone would grow the coordinator by megabytes an hour. **The rule,
stated here once:** a curve kept in memory holds at most :data:`CURVE_LIMIT` points; past it,
its older half is thinned to every other point, the first point kept. The newer half stays
whole, so the stop decision, the status and the dashboard see every recent point, and the
curve keeps its shape over the whole run (the old part at a resolution that halves with each
thinning). Every point is still in the metrics file on disk, which is never thinned.

A follower that copies new points (the dashboard's archive, the metrics file's writer) counts
the points ever appended, not list positions, which thinning shifts: :func:`since` turns such
a count into the points it has not seen.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["CURVE_LIMIT", "since", "thin"]

CURVE_LIMIT = 1024
"""Most points a curve keeps in memory. Measured in a 30-minute soak (grid:5x5, ten points a
second): with 4,096 the coordinator grew from 72 to 90 MB over its first 12 minutes, then stayed;
with 1,024 it levelled at 77 MB within 4 minutes. The first hundred seconds of a run are kept
whole."""

T = TypeVar("T")


def thin(points: list[T], limit: int = CURVE_LIMIT) -> int:
    """Thin ``points`` in place when it holds more than ``limit``; return how many it dropped.

    Examples
    --------
    >>> p = list(range(10))
    >>> thin(p, limit=8), p
    (2, [0, 1, 3, 5, 6, 7, 8, 9])
    >>> thin(p, limit=8)
    0
    """
    if limit < 4:
        raise ValueError(f"a curve keeps at least 4 points; got limit={limit}")
    if len(points) <= limit:
        return 0
    half = len(points) // 2
    old = points[1:half]
    kept = old[::2]
    points[1:half] = kept
    return len(old) - len(kept)


def since(points: list[T], dropped: int, seen: int) -> list[T]:
    """The points of ``points`` appended after the first ``seen`` ever appended.

    ``dropped`` is how many points thinning has removed so far. Thinning only touches the
    older half, so a follower that lags by at most half the limit gets exactly its new points
    (the dashboard and the metrics file follow every fraction of a second).

    Examples
    --------
    >>> p = list(range(10))
    >>> dropped = thin(p, limit=8)
    >>> since(p, dropped, seen=8)
    [8, 9]
    """
    return points[max(0, seen - dropped) :]
