"""The dashboard of a live local cluster: ``gossip up --dashboard-port``, real nodes, a browser."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from dash_helpers import ARTIFACTS, CHROMIUM, chromium_tab, need, promtool_problems
from playwright.async_api import TimeoutError as PlaywrightTimeout
from prometheus_client.parser import text_string_to_metric_families

from continuized.coordinator.machine.children import spawn, stop_process
from continuized.coordinator.machine.ports import free_port

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.browser,
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.timeout(180),
]


async def _json(session: aiohttp.ClientSession, url: str) -> dict[str, object]:
    async with session.get(url) as resp:
        assert resp.status == 200, url
        data: dict[str, object] = await resp.json()
        return data


async def _wait_running(session: aiohttp.ClientSession, url: str, proc: object) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            summary = await _json(session, url + "api/summary")
            if summary["t"] and summary["nodes_alive"] == summary["expected"]:
                return
        except aiohttp.ClientError:
            pass  # not listening yet
        await asyncio.sleep(0.3)
    raise AssertionError("the cluster did not start reporting within 90 s")


async def _wait_page(page: Any, condition: str, tmp_path: Path) -> None:
    """Wait for ``condition`` in the page; if it never holds, say what the page and run saw."""
    try:
        await page.wait_for_function(condition, timeout=30_000)
    except PlaywrightTimeout:
        seen = await page.evaluate(
            "window.__dash ? JSON.stringify({errors: window.__dash.errors, "
            "snapshots: window.__dash.snapshots, graph: window.__dash.graphNodes()}) : 'no page'"
        )
        log = (tmp_path / "up.log").read_text(errors="replace")[-3000:]
        message = f"{condition!r} never held; the page: {seen}; up.log:\n{log}"
        raise AssertionError(message) from None


async def test_dashboard_of_a_live_cluster(tmp_path: Path) -> None:
    need(CHROMIUM)
    need("mosquitto")
    port = free_port()
    token = "live-test"
    argv = [
        sys.executable, "-m", "continuized.cli.app", "up",
        # The run must outlast the test: ARG on grid:3x3 reaches the float floor (every x equal
        # to the mean, error exactly 0, which is <= any eps) near t = 700-900, so at rate 10 it
        # lasts over a minute of wall time from t = 0, whatever the machine's load.
        "--graph", "grid:3x3", "--algorithm", "arg", "--rate", "10",
        "--until", "1e-300", "--timeout", "120",
        "--metrics-file", str(tmp_path / "run.jsonl"), "--log-dir", str(tmp_path / "logs"),
        "--dashboard-port", str(port), "--dashboard-token", token,
        "--dashboard-runs-dir", str(tmp_path / "runs"),
    ]  # fmt: skip
    proc = await spawn(argv, log=tmp_path / "up.log")
    url = f"http://127.0.0.1:{port}/"
    try:
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(headers=headers) as session:
            await _wait_running(session, url, proc)

            async with chromium_tab() as tab:
                page = tab.page
                await page.goto(f"{url}?token={token}")
                nine = "window.__dash && window.__dash.graphNodes() === 9"
                await _wait_page(page, nine, tmp_path)
                await _wait_page(page, "window.__dash.livePoints() >= 2", tmp_path)
                before = await page.evaluate("window.__dash.livePoints()")
                await _wait_page(page, f"window.__dash.livePoints() >= {before + 3}", tmp_path)
                # The exact curve (gossip.exchange.trace) grows beside the estimated one.
                await _wait_page(page, "window.__dash.exactPoints() >= 2", tmp_path)
                exact = await page.evaluate("window.__dash.exactPoints()")
                await _wait_page(page, f"window.__dash.exactPoints() >= {exact + 3}", tmp_path)
                rows = await page.locator("#nodes-table tbody tr").count()
                assert rows == 9
                assert await page.locator("#c-alive").inner_text() == "9 / 9"
                ARTIFACTS.mkdir(exist_ok=True)
                await page.screenshot(path=str(ARTIFACTS / "dashboard-live.png"), full_page=True)
                assert tab.errors() == []

            # /metrics agrees with the coordinator's own state, read just before and after.
            first = await _json(session, url + "api/state")
            async with session.get(url + "metrics") as resp:
                text = await resp.text()
            second = await _json(session, url + "api/state")
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C: the launcher stops everything cleanly
            try:
                await asyncio.wait_for(proc.wait(), timeout=30)
            finally:
                await stop_process(proc)
    assert proc.returncode is not None
    # The launcher tells the user where to point a browser.
    assert f"dashboard: http://127.0.0.1:{port}/" in (tmp_path / "up.log").read_text()

    assert promtool_problems(text) == []  # a real scrape follows Prometheus's conventions
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    s1, s2 = first["summary"], second["summary"]
    assert isinstance(s1, dict)
    assert isinstance(s2, dict)
    assert samples[("gossip_nodes_expected", ())] == 9
    assert s1["t"] <= samples[("gossip_t", ())] <= s2["t"]
    info = {
        k: v for (name, labels), _ in samples.items() if name == "gossip_info" for k, v in labels
    }
    assert info["graph"] == "grid:3x3"
    assert info["algorithm"] == "arg"
    assert info["run_id"] == s2["run_id"]
    params = second["params"]
    assert isinstance(params, dict)
    assert samples[("gossip_theta", ())] == pytest.approx(params["theta"])
    nodes1 = {n["node"]: n for n in first["nodes"]}  # type: ignore[attr-defined]
    nodes2 = {n["node"]: n for n in second["nodes"]}  # type: ignore[attr-defined]
    for node, view in nodes2.items():
        key = (("name", view["name"]), ("node", str(node)))
        reports = samples[("gossip_node_reports_total", key)]
        assert nodes1[node]["reports"] <= reports <= view["reports"]
        initiated = samples[("gossip_node_exchanges_total", (("kind", "initiated"), *key))]
        assert nodes1[node]["counters"]["initiated"] <= initiated
        assert initiated <= view["counters"]["initiated"]
    assert json.dumps(second)  # the state is JSON-ready
