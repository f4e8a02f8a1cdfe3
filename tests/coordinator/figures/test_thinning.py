"""A long run's curves stay bounded in memory, and their followers still get every new point."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from continuized.coordinator.figures.thinning import since, thin


@given(n=st.integers(0, 400), limit=st.integers(4, 100))
def test_thinning_keeps_the_first_point_and_the_newer_half_whole(n: int, limit: int) -> None:
    points = list(range(n))
    dropped = thin(points, limit)
    assert len(points) + dropped == n
    assert points == sorted(points)
    if n <= limit:
        assert dropped == 0
        return
    assert points[0] == 0
    assert points[-(n - n // 2) :] == list(range(n // 2, n))  # the newer half, whole
    assert dropped == (n // 2 - 1) - len(range(1, n // 2, 2))


@given(batches=st.lists(st.integers(1, 20), min_size=1, max_size=200), limit=st.integers(40, 80))
def test_a_follower_that_keeps_up_gets_each_point_once_in_order(
    batches: list[int], limit: int
) -> None:
    points: list[int] = []
    dropped = seen = 0
    got: list[int] = []
    appended = 0
    for size in batches:
        for _ in range(size):
            points.append(appended)
            appended += 1
            dropped += thin(points, limit)
            assert len(points) <= limit
        got += since(points, dropped, seen)
        seen = len(points) + dropped
    assert got == list(range(appended))
