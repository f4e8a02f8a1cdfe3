"""The membership timeline on the page: leaves, dead nodes and refusals, live and on reload."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from dash_helpers import ARTIFACTS, CHROMIUM, chromium_tab, need

from continuized.coordinator.dashboard.feed import membership_events
from continuized.coordinator.dashboard.synthetic import SyntheticCluster

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

ROWS = "document.querySelectorAll('#membership-table tbody tr').length"


def test_membership_events_are_json_safe() -> None:
    state = SyntheticCluster("line:4", "arg", rate=100.0, seed=0, run_id="m").new_state()
    state.churn.append({"kind": "leave", "wall": 1.0, "t": float("inf"), "node": 3})
    assert membership_events(state) == [{"kind": "leave", "wall": 1.0, "t": None, "node": 3}]


async def test_the_page_shows_leaves_and_dead_nodes_as_they_happen(
    start_dashboard: Callable[..., Any],
) -> None:
    need(CHROMIUM)
    cluster = SyntheticCluster("grid:4x4", "arg", rate=150.0, seed=5, run_id="churn")
    state = cluster.new_state()
    served = await start_dashboard(state, interval=0.1)
    async with chromium_tab() as tab:
        page = tab.page
        await page.goto(served.url)
        await page.wait_for_function("window.__dash && window.__dash.snapshots >= 1")
        assert await page.evaluate(ROWS) == 0
        assert await page.locator("#membership-note").inner_text() == "no joins or leaves"
        # A leave arrives in a live batch (no new snapshot).
        snapshots = await page.evaluate("window.__dash.snapshots")
        state.churn.append(
            {
                "kind": "leave",
                "wall": 1.8e9,
                "node": 15,
                "name": "n15",
                "view": 1,
                "t": 812.5,
                "members": 15,
            }
        )
        state.touch()
        await page.wait_for_function(f"{ROWS} === 1", timeout=20_000)
        assert await page.evaluate("window.__dash.snapshots") == snapshots
        cells = await page.locator("#membership-table tbody tr td").all_inner_texts()
        assert cells[1:6] == ["leave", "n15", "1", "812.5", "15"]
        state.churn.append(
            {
                "kind": "dead",
                "wall": 1.8e9 + 5,
                "node": 3,
                "name": "n3",
                "view": 2,
                "t": 1500.0,
                "members": 14,
            }
        )
        state.churn.append(
            {"kind": "refused", "wall": 1.8e9 + 6, "name": "zz", "detail": "no node 'zz'"}
        )
        await page.wait_for_function(f"{ROWS} === 3", timeout=20_000)
        assert await page.locator("#membership-note").inner_text() == "3 event(s)"
        # A reload draws the same timeline from the snapshot.
        await page.reload()
        await page.wait_for_function(f"window.__dash && {ROWS} === 3", timeout=20_000)
        kinds = await page.locator("#membership-table tbody tr td:nth-child(2)").all_inner_texts()
        assert kinds == ["leave", "dead", "refused"]
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "dashboard-membership.png"), full_page=True)
        assert tab.errors() == []
