"""The page in a real headless Chromium, fed live by a synthetic cluster in the test's loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from dash_helpers import ARTIFACTS, CHROMIUM, chromium_tab, need

from continuized.coordinator.dashboard.synthetic import SyntheticCluster
from continuized.coordinator.figures.state import ClusterState

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


async def _run_cluster(
    current: list[SyntheticCluster], state: ClusterState, stop: asyncio.Event
) -> None:
    while not stop.is_set():
        current[-1].feed(state)
        await asyncio.sleep(0.1)


async def _wait_for(page: Any, expression: str, timeout_s: float = 20.0) -> None:
    await page.wait_for_function(expression, timeout=timeout_s * 1000)


async def test_live_page_draws_the_cluster_and_overlays_runs(
    start_dashboard: Callable[..., Any],
) -> None:
    need(CHROMIUM)
    current = [SyntheticCluster("grid:5x5", "arg", rate=150.0, seed=2, run_id="arg-first")]
    state = current[0].new_state()
    served = await start_dashboard(state, interval=0.1, band_runs=8)
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(_run_cluster(current, state, stop), name="synthetic-cluster")
        try:
            async with chromium_tab() as tab:
                page = tab.page
                await page.goto(served.url)
                await _wait_for(page, "window.__dash && window.__dash.snapshots >= 1")

                # The graph shows every node, and the table has a row per node.
                await _wait_for(page, "window.__dash.graphNodes() === 25")
                assert await page.locator("#nodes-table tbody tr").count() == 25

                # The error chart gains points while reports arrive.
                await _wait_for(page, "window.__dash.livePoints() >= 3")
                before = await page.evaluate("window.__dash.livePoints()")
                await _wait_for(page, f"window.__dash.livePoints() >= {before + 5}")
                assert await page.evaluate("window.__dash.batches") >= 5

                # The simulator's band arrives from its child process and is drawn.
                await _wait_for(
                    page,
                    "document.getElementById('error-chart').data"
                    ".some(t => (t.name || '').startsWith('simulator'))",
                    timeout_s=60,
                )
                cards = await page.locator("#c-alive").inner_text()
                assert cards == "25 / 25"
                ARTIFACTS.mkdir(exist_ok=True)
                await page.screenshot(
                    path=str(ARTIFACTS / "dashboard-synthetic.png"), full_page=True
                )

                # A second run (another run id) is overlaid on the first, each downloadable.
                # (The coordinator would start a new run; here the synthetic one is swapped.)
                current.append(
                    SyntheticCluster("grid:5x5", "rg", rate=150.0, seed=3, run_id="rg-next")
                )
                state.run_id, state.params = "rg-next", current[-1].params
                state.history, state.reached, state.t_eps = [], False, None
                await _wait_for(
                    page, "document.querySelectorAll('#runs-table tbody tr').length === 2"
                )
                await _wait_for(page, "window.__dash.livePoints() >= 3")
                links = await page.locator("#runs-table a").evaluate_all(
                    "els => els.map(e => e.getAttribute('href'))"
                )
                assert sorted(links) == sorted(
                    f"api/runs/{run}.{fmt}"
                    for run in ("arg-first", "rg-next")
                    for fmt in ("csv", "jsonl")
                )
                names = await page.evaluate(
                    "document.getElementById('error-chart').data.map(t => t.name || '')"
                )
                assert any(n.startswith("ARG grid:5x5 (arg-first)") for n in names)
                assert any(n.startswith("RG grid:5x5 (rg-next)") for n in names)
                await page.screenshot(
                    path=str(ARTIFACTS / "dashboard-two-runs.png"), full_page=True
                )
                assert tab.errors() == []
        finally:
            stop.set()


async def test_runs_table_follows_the_live_run_like_the_header(
    start_dashboard: Callable[..., Any],
) -> None:
    need(CHROMIUM)
    current = [SyntheticCluster("grid:4x4", "arg", rate=150.0, seed=4, run_id="live-row")]
    state = current[0].new_state()
    served = await start_dashboard(state, interval=0.1)
    stop = asyncio.Event()
    # The live run's row and the header's t card, as numbers ("–" reads as NaN).
    row_t = "Number(document.querySelector('#runs-table tbody tr.current').children[4].textContent)"
    row_teps = "document.querySelector('#runs-table tbody tr.current').children[6].textContent"
    head_t = "Number(document.getElementById('c-t').textContent)"
    async with asyncio.TaskGroup() as tg:
        tg.create_task(_run_cluster(current, state, stop), name="synthetic-cluster")
        try:
            async with chromium_tab() as tab:
                page = tab.page
                await page.goto(served.url)
                await _wait_for(page, "window.__dash && window.__dash.snapshots >= 1")
                await _wait_for(page, f"{row_t} > 0")
                first = await page.evaluate(row_t)
                # The row moves on with the batches (no new snapshot), in step with the header.
                snapshots = await page.evaluate("window.__dash.snapshots")
                await _wait_for(page, f"{row_t} > 2 * {first}")
                await _wait_for(page, f"Math.abs({row_t} - {head_t}) <= 1e-3 * {head_t}")
                assert await page.evaluate("window.__dash.snapshots") == snapshots
                # eps reached: the row shows t_eps, the same t as the header's note.
                state.mark_reached(state.t, state.history[-1].wall)
                t_eps = state.t_eps
                assert t_eps is not None
                await _wait_for(page, f"{row_teps} !== '–'")
                shown = float(await page.evaluate(row_teps))
                assert shown == pytest.approx(t_eps, rel=1e-3)
                header = await page.locator("#c-teps").inner_text()
                assert float(header.rsplit("=", 1)[1]) == pytest.approx(t_eps, rel=1e-4)
                assert tab.errors() == []
        finally:
            stop.set()


async def test_page_passes_its_token_to_the_api(start_dashboard: Callable[..., Any]) -> None:
    need(CHROMIUM)
    cluster = SyntheticCluster("line:8", "arg", rate=100.0, run_id="tok")
    state = cluster.new_state()
    cluster.feed(state)
    served = await start_dashboard(state, token="letmein", interval=0.1)
    async with chromium_tab() as tab:
        await tab.page.goto(served.url + "?token=letmein")
        await _wait_for(
            tab.page,
            "window.__dash && window.__dash.snapshots >= 1 && window.__dash.graphNodes() === 8",
        )
        assert tab.errors() == []
        # Without the token the page loads but may read nothing, and says why.
        await tab.page.goto(served.url)
        await _wait_for(
            tab.page, "document.getElementById('state-badge').textContent === 'token required'"
        )
        assert await tab.page.evaluate("window.__dash.snapshots") == 0


async def test_rows_off_screen_are_brought_up_to_date_when_scrolled_into_view(
    start_dashboard: Callable[..., Any],
) -> None:
    need(CHROMIUM)
    cluster = SyntheticCluster("grid:6x6", "arg", rate=300.0, run_id="scroll")
    state = cluster.new_state()
    cluster.feed(state)
    served = await start_dashboard(state, interval=0.1)
    async with chromium_tab(height=900) as tab:
        page = tab.page
        await page.goto(served.url)
        await _wait_for(page, "window.__dash && window.__dash.graphNodes() === 36")
        last = page.locator("#nodes-table tbody tr").last
        assert not await last.is_visible() or not await last.evaluate(
            "tr => { const r = tr.getBoundingClientRect(); return r.top < innerHeight; }"
        )
        await _wait_for(page, "window.__dash.rowsOnScreen() < 36")
        seen = await page.evaluate("window.__dash.batches")
        before = state.nodes[35].counters["served"]
        await asyncio.sleep(1.0)
        cluster.feed(state)  # new counters for every node, the last one included
        assert state.nodes[35].counters["served"] != before  # ~2 s at 300/s: ~20 exchanges
        await _wait_for(page, f"window.__dash.batches > {seen}")
        await last.scroll_into_view_if_needed()
        want = f"{state.nodes[35].counters['served']:,}"
        await _wait_for(
            page,
            "document.querySelector('#nodes-table tbody tr:last-child')"
            f".children[6].textContent === '{want}'",
            timeout_s=10,
        )
        assert tab.errors() == []


async def test_a_node_that_stops_reporting_turns_stale_then_dead(
    start_dashboard: Callable[..., Any],
) -> None:
    need(CHROMIUM)
    cluster = SyntheticCluster("line:6", "arg", rate=100.0, run_id="stale")
    state = cluster.new_state()
    # Stale after alive_timeout / 2 = 1.5 s without a report, dead after 3 s; the page
    # refreshes ages once a second, so it sees the stale phase.
    assert state.alive_timeout == 3.0
    stop = asyncio.Event()
    served = await start_dashboard(state, interval=0.1)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(_run_cluster([cluster], state, stop), name="synthetic-cluster")
        try:
            async with chromium_tab() as tab:
                page = tab.page
                await page.goto(served.url)
                await _wait_for(page, "window.__dash && window.__dash.graphNodes() === 6")
                row = "document.querySelector('#nodes-table tbody tr[data-node=\"4\"]')"
                assert await page.evaluate(f"{row}.className") == ""
                cluster.silent.add(4)
                await _wait_for(page, f"{row}.className === 'stale'", timeout_s=10)
                assert await page.locator("#c-stale").inner_text() == "1 stale, 6 registered"
                await _wait_for(page, f"{row}.className === 'dead'", timeout_s=10)
                await _wait_for(page, "document.getElementById('c-alive').textContent === '5 / 6'")
                others = await page.evaluate(
                    "[...document.querySelectorAll('#nodes-table tbody tr')]"
                    ".filter(r => r.dataset.node !== '4').map(r => r.className)"
                )
                assert others == [""] * 5
                assert tab.errors() == []
        finally:
            stop.set()


async def test_the_colour_scale_has_the_range_of_the_colours_drawn(
    start_dashboard: Callable[..., Any],
) -> None:
    need(CHROMIUM)
    cluster = SyntheticCluster("line:6", "arg", rate=100.0, run_id="colours")
    state = cluster.new_state()
    cluster.feed(state)
    served = await start_dashboard(state, interval=0.1)

    def set_values(values: list[float]) -> None:
        for node, value in enumerate(values):
            view = state.nodes[node]
            view.x = view.z = (value,)
            view.reports += 1  # the feed sends the rows whose report count changed

    labels = "[...document.querySelectorAll('.colorbar text')].map(t => t.textContent)"
    fills = (
        "new Set([...document.querySelectorAll('circle.node')].map(c => c.getAttribute('fill')))"
    )
    bar = "document.querySelector('.colorbar rect').getAttribute('fill')"
    async with chromium_tab() as tab:
        page = tab.page
        await page.goto(served.url)
        await _wait_for(page, "window.__dash && window.__dash.graphNodes() === 6")
        # A constant field: one colour, and a bar of that colour that says "all".
        set_values([0.5] * 6)
        await _wait_for(page, f"{labels}[0] === 'all 0.5'")
        assert await page.evaluate(f"{labels}") == ["all 0.5", "", "x"]
        assert await page.evaluate(f"{fills}.size") == 1
        assert await page.evaluate(f"{fills}.has({bar})")
        # Values 1e-12 apart: every colour is drawn, and the labels tell the ends apart.
        set_values([0.0625 + k * 1e-12 for k in range(6)])
        await _wait_for(page, f"{fills}.size === 6")
        hi, lo, title = await page.evaluate(labels)
        assert hi != lo
        assert title.startswith("x − 0.0625")
        offset = float(title.split("−")[1])
        assert offset + float(hi) == pytest.approx(0.0625 + 5e-12, abs=1e-15)
        assert offset + float(lo) == pytest.approx(0.0625, abs=1e-15)
        assert await page.evaluate(bar) == "url(#viridis)"
        ARTIFACTS.mkdir(exist_ok=True)
        await page.locator("#graph-chart").screenshot(
            path=str(ARTIFACTS / "dashboard-colour-scale.png")
        )
        assert tab.errors() == []
