"""The page tells the run's truth: a live ``gossip up`` in a browser, held against its --json.

For a gossip run and an optimization run, while each runs and after it (``--hold`` keeps the
dashboard up on the finished state), the page must name the run's algorithm and problem, show
the exact mass drift, the achieved rate, a finished run as finished, and, once it finished, the
t, error, points, rate and drift the run's own ``--json`` summary holds. Earlier runs of the
other kind, found in the runs directory, must not be drawn on its axes.

A training run's page speaks training: its algorithm, accuracy, gradient steps per node and
exchanges over the network, no averaging error nor mass drift, and once it finished the figures
of its ``--json`` summary under the summary's own names.
"""

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
from dash_helpers import ARTIFACTS, CHROMIUM, chromium_tab, need
from playwright.async_api import TimeoutError as PlaywrightTimeout

from continuized.coordinator.dashboard.runs import RunRecord
from continuized.coordinator.figures.train_figures import TRAINING_KEYS
from continuized.coordinator.machine.children import spawn, stop_process
from continuized.coordinator.machine.ports import free_port

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.browser,
    pytest.mark.broker,
    pytest.mark.slow,
    pytest.mark.timeout(420),
]

GRAPH = "grid:3x3"

# Each run lasts a fixed 40 s (its --timeout; the target is out of reach), long enough for
# the live checks however slowly the machine starts the page: reaching a target makes the
# length depend on the load (ARG on grid:3x3 reached 1e-24 in 20 s, before a loaded machine's
# page was up). Both runs then stop on "timeout", as clean a stop as "reached".
RUNS = {
    "gossip": ["--algorithm", "arg", "--rate", "20", "--until", "1e-300", "--timeout", "40"],
    "optimization": [
        "--problem", "logistic:0.1", "--data", "breast-cancer", "--split", "label:1",
        "--rate", "60", "--until", "1e-300", "--timeout", "40",
    ],
}  # fmt: skip

# A small training run (softmax on digits over cycle:4, 5 gradient steps per node per second)
# stopped by its --timeout (the accuracy target is out of reach, for the reason above), with a
# small simulator band so that the run does not wait long for it after the stop.
TRAINING = [
    "--graph", "cycle:4", "--train", "softmax", "--data", "digits", "--split", "iid:0",
    "--algorithm", "a2cid2", "--lr", "0.1", "--rate", "5", "--until-accuracy", "0.999",
    "--timeout", "14", "--training-runs", "9",
]  # fmt: skip


def _text(element_id: str) -> str:
    return f"document.getElementById('{element_id}').textContent"


def _earlier_run_of_the_other_kind(runs_dir: Path, kind: str) -> str:
    """Leave a finished run of the other kind on the same graph in the runs directory."""
    if kind == "gossip":
        record = RunRecord("earlier-acd", graph=GRAPH, algorithm="acd", problem="logistic:0.1")
    else:
        record = RunRecord("earlier-arg", graph=GRAPH, algorithm="arg")
    record.points.extend((float(t), 2.0**-t, 0.0, 0.0) for t in range(1, 30))
    runs_dir.mkdir(parents=True, exist_ok=True)
    (runs_dir / f"{record.run_id}.jsonl").write_text(record.to_jsonl())
    return record.run_id


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


async def _wait(page: Any, condition: str, log: Path, timeout_s: float = 60.0) -> None:
    """Wait for ``condition`` in the page; if it never holds, say what the page and run saw."""
    try:
        await page.wait_for_function(condition, timeout=timeout_s * 1000)
    except PlaywrightTimeout:
        seen = await page.evaluate(
            "JSON.stringify(Object.fromEntries(['state-badge', 'c-t', 'c-error', 'c-rate', "
            "'c-drift', 'c-mean', 'c-alive', 'algo-badge'].map(i => "
            "[i, document.getElementById(i).textContent])))"
        )
        tail = _tail(log)
        raise AssertionError(
            f"{condition!r} never held; the page: {seen}; up.log:\n{tail}"
        ) from None


async def _wait_running(url: str, log: Path) -> None:
    deadline = time.monotonic() + 150
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url + "api/summary") as resp:
                    summary = await resp.json()
                if summary["t"] and summary["nodes_alive"] == summary["expected"]:
                    return
            except (aiohttp.ClientError, ValueError):
                pass  # not listening yet
            await asyncio.sleep(0.3)
    raise AssertionError("the cluster did not start reporting:\n" + _tail(log))


async def _held_summary(url: str, log: Path) -> dict[str, Any]:
    """The summary the dashboard serves once the run is over: the run's own dashboard may be
    closing, and the held one not listening yet (the nodes and the broker stop in between)."""
    deadline = time.monotonic() + 120
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(url + "api/summary") as resp:
                    summary: dict[str, Any] = await resp.json()
                    return summary
            except aiohttp.ClientConnectionError:
                assert time.monotonic() < deadline, "the held dashboard never listened:\n" + _tail(
                    log
                )
                await asyncio.sleep(0.2)


async def _number(page: Any, element_id: str) -> float:
    return float(await page.evaluate(_text(element_id)))


async def _pair(page: Any, element_id: str) -> tuple[str, float]:
    """``(achieved, asked)`` of an ``achieved / asked`` card (achieved as text: "–" unknown)."""
    achieved, asked = (await page.evaluate(_text(element_id))).split(" / ")
    return achieved, float(asked)


async def _hidden(page: Any, element_id: str) -> bool:
    return bool(await page.evaluate(f"document.getElementById('{element_id}').hidden"))


async def _legend_clear_of_toolbar(page: Any) -> None:
    boxes = await page.evaluate(
        "['.modebar', '.legend'].map(s => { const r = document.querySelector('#error-chart ' + s)"
        ".getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })"
    )
    (l1, t1, r1, b1), (l2, t2, r2, b2) = boxes
    assert r1 > l1, boxes  # both drawn
    assert r2 > l2, boxes
    assert r1 <= l2 or r2 <= l1 or b1 <= t2 or b2 <= t1, f"legend covers the toolbar: {boxes}"


async def _check_live(page: Any, kind: str, log: Path, other: str) -> None:
    if kind == "gossip":
        assert await page.evaluate(_text("algo-badge")) == "ARG · averaging"
        assert (await page.evaluate(_text("error-title"))).startswith("Error Σ½|x_v − mean|²")
        # The drift is the exact curve's: rounding only, never an alarm for a healthy run.
        await _wait(page, f"{_text('c-mean')} === 'from the exact curve'", log)
        assert await _number(page, "c-drift") <= 1e-12
        assert await page.evaluate("document.getElementById('c-drift').className") == "value"
    else:
        assert await page.evaluate(_text("algo-badge")) == "ACD · logistic:0.1"
        title = await page.evaluate(_text("error-title"))
        assert title.startswith("Distance Σ|x_v − x*|² and objective gap"), title
        # The nodes trace their dual y: the drift of the dual sums is the exact curve's too.
        await _wait(page, f"{_text('c-mean')} === 'from the exact curve'", log)
        assert await _number(page, "c-drift") <= 1e-12
        assert await page.evaluate("document.getElementById('c-drift').className") == "value"
        # The objective gap grows with the batches, without a new snapshot.
        await _wait(page, "window.__dash.gapPoints() >= 2", log)
        before = await page.evaluate("[window.__dash.gapPoints(), window.__dash.snapshots]")
        await _wait(page, f"window.__dash.gapPoints() >= {before[0] + 3}", log)
        assert await page.evaluate("window.__dash.snapshots") == before[1]
    # The achieved rate is measured while the run goes on.
    await _wait(page, f"!{_text('c-rate')}.startsWith('–')", log)
    achieved, asked = (await page.evaluate(_text("c-rate"))).split(" / ")
    assert float(achieved) > 0
    assert float(asked) == float(RUNS[kind][RUNS[kind].index("--rate") + 1])
    assert await page.evaluate(_text("c-alive")) == "9 / 9"
    assert await page.evaluate(_text("state-badge")) == "running"
    names = await page.evaluate("document.getElementById('error-chart').data.map(t => t.name)")
    assert not any(other in (n or "") for n in names), names
    await _legend_clear_of_toolbar(page)


async def _check_finished(page: Any, kind: str, summary: dict[str, Any], log: Path) -> None:
    """The held page against the run's --json summary."""
    await _wait(page, f"{_text('state-badge')}.startsWith('finished')", log)
    await _wait(page, f"{_text('c-mean')} === 'from the final reports'", log)
    reason = "ε reached" if summary["reached"] else summary["stop_reason"]
    assert await page.evaluate(_text("state-badge")) == f"finished: {reason}"
    assert await _number(page, "c-t") == pytest.approx(summary["final_t"], rel=1e-4)
    assert await _number(page, "c-error") == pytest.approx(summary["final_error"], rel=2e-3)
    drift = await _number(page, "c-drift")
    assert drift == pytest.approx(summary["mass_drift_rel"], rel=1e-2, abs=1e-300)
    assert await page.evaluate("document.getElementById('c-drift').className") == "value"
    achieved, asked = (await page.evaluate(_text("c-rate"))).split(" / ")
    assert float(achieved) == pytest.approx(summary["rate_achieved"], rel=5e-3)
    assert float(asked) == summary["rate_asked"]
    # A clean stop: every node sent its final report; nothing reads as an alarm.
    assert await page.evaluate(_text("c-alive-label")) == "nodes stopped (final report)"
    assert await page.evaluate(_text("c-alive")) == "9 / 9"
    assert await page.evaluate("document.getElementById('c-alive').className") == "value ok"
    # The run's own dashboard may still be up (its link open) or the held one (link closed).
    assert await page.evaluate(_text("c-broker")) in ("connected", "closed")
    assert "bad" not in await page.evaluate("document.getElementById('c-broker').className")
    rows = await page.evaluate(
        "[...document.querySelectorAll('#nodes-table tbody tr')].map(r => r.className)"
    )
    assert rows == ["final"] * 9
    # The Runs table's live row: the run's own points, t and error.
    row = await page.evaluate(
        "[...document.querySelector('#runs-table tbody tr.current').children]"
        ".map(td => td.textContent)"
    )
    metrics = [json.loads(line) for line in (log.parent / "run.jsonl").read_text().splitlines()]
    assert row[0] == f"{summary['run_id']} (this run, over)"
    # Both kinds have an exact curve (optimization nodes trace their dual y): its points.
    assert int(row[3]) == sum(1 for m in metrics if m.get("kind") == "exact")
    assert int(row[3]) == summary["exact_points"]
    assert float(row[4]) == pytest.approx(summary["final_t"], rel=1e-3)
    assert float(row[5]) == pytest.approx(summary["final_error"], rel=2e-3)
    # The colour scale's labels tell its ends apart (or say the field is constant).
    labels = await page.evaluate(
        "[...document.querySelectorAll('.colorbar text')].map(t => t.textContent)"
    )
    assert labels[0].startswith("all ") or labels[0] != labels[1], labels
    await _legend_clear_of_toolbar(page)


@pytest.mark.parametrize("kind", ["gossip", "optimization"])
async def test_the_page_agrees_with_the_runs_summary(kind: str, tmp_path: Path) -> None:
    need(CHROMIUM)
    need("mosquitto")
    port = free_port()
    other = _earlier_run_of_the_other_kind(tmp_path / "runs", kind)
    argv = [
        sys.executable, "-m", "continuized.cli.app", "up", "--graph", GRAPH, *RUNS[kind],
        "--json", str(tmp_path / "run.json"), "--metrics-file", str(tmp_path / "run.jsonl"),
        "--log-dir", str(tmp_path / "logs"), "--quiet",
        "--dashboard-port", str(port), "--dashboard-runs-dir", str(tmp_path / "runs"),
        "--hold", "900",  # ended by Ctrl-C once checked; long enough for a loaded machine
    ]  # fmt: skip
    log = tmp_path / "up.log"
    proc = await spawn(argv, log=log)
    url = f"http://127.0.0.1:{port}/"
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        await _wait_running(url, log)
        async with chromium_tab() as tab:
            page = tab.page
            await page.goto(url)
            await _wait(page, "window.__dash && window.__dash.graphNodes() === 9", log)
            await _wait(page, "window.__dash.livePoints() >= 2", log)
            await _check_live(page, kind, log, other)
            await page.screenshot(
                path=str(ARTIFACTS / f"dashboard-{kind}-live.png"), full_page=True
            )

            deadline = time.monotonic() + 200
            while not (tmp_path / "run.json").is_file():
                assert proc.returncode is None, _tail(log)
                assert time.monotonic() < deadline, "the run did not finish"
                await asyncio.sleep(0.5)
            await asyncio.sleep(0.5)  # the file is written whole, but let the writer close it
            summary = json.loads((tmp_path / "run.json").read_text())
            await _check_finished(page, kind, summary, log)
            await page.screenshot(
                path=str(ARTIFACTS / f"dashboard-{kind}-finished.png"), full_page=True
            )
            # The run's own dashboard closes with the run and the held one opens: the stream
            # is cut, then refused in between, which the browser logs. Nothing else may go wrong.
            swap = ("net::ERR_CONNECTION_REFUSED", "net::ERR_INCOMPLETE_CHUNKED_ENCODING")
            errors = [e for e in tab.errors() if not e[1].endswith(swap)]
            assert errors == []
        api = await _held_summary(url, log)
        assert api["mass_drift_rel"] == summary["mass_drift_rel"]
        assert api["t"] == summary["final_t"]
        assert api["error"] == summary["final_error"]
        assert api["rate_achieved"] == summary["rate_achieved"]
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C ends the hold
            try:
                await asyncio.wait_for(proc.wait(), timeout=30)
            finally:
                await stop_process(proc)


async def _check_training_live(page: Any, log: Path) -> None:
    """The page of a training run as it goes on: training figures, no averaging figure."""
    assert await page.evaluate(_text("algo-badge")) == "A2CID2 · training softmax on digits"
    assert not await _hidden(page, "training-panel")
    for card in ("error-panel", "card-error", "card-drift"):
        assert await _hidden(page, card), card
    for card in ("card-accuracy", "card-network", "card-fresh"):
        assert not await _hidden(page, card), card
    assert await page.evaluate(_text("c-rate-label")) == (
        "gradient steps/s per node (achieved / asked)"
    )
    await _wait(page, "window.__dash.trainPoints() >= 1", log)
    await _wait(page, f"!{_text('c-rate')}.startsWith('–')", log)
    await _wait(page, f"!{_text('c-network')}.startsWith('–')", log)
    achieved, asked = await _pair(page, "c-rate")
    assert float(achieved) > 0
    assert asked == 5.0
    achieved, asked = await _pair(page, "c-network")
    assert float(achieved) > 0
    assert asked == 5.0 * 4 / 2  # rate * n * rate_com / 2 exchanges per second
    assert await page.evaluate(_text("c-teps")) == "target accuracy 0.999"
    assert float(await page.evaluate(_text("c-accuracy"))) > 0
    assert (await page.evaluate(_text("c-fresh"))).endswith(" s")
    assert (await page.evaluate(_text("c-fresh-sub"))).startswith("oldest node report ")
    assert await page.evaluate(_text("c-alive")) == "4 / 4"
    row = await page.evaluate(
        "[...document.querySelector('#runs-table tbody tr.current').children]"
        ".map(td => td.textContent)"
    )
    assert row[1] == "A2CID2"
    heads = await page.evaluate(
        "[...document.querySelectorAll('#runs-table th')].map(th => th.textContent)"
    )
    assert heads[5:7] == ["accuracy", "t at target"]
    assert await page.evaluate("window.__dash.livePoints()") == 0  # no error curve drawn


async def _check_training_finished(page: Any, summary: dict[str, Any], log: Path) -> None:
    """The held page of a training run against its --json summary."""
    await _wait(page, f"{_text('state-badge')}.startsWith('finished')", log, timeout_s=90)
    assert await page.evaluate(_text("state-badge")) == f"finished: {summary['stop_reason']}"
    train = summary["training"]
    assert await _number(page, "c-t") == pytest.approx(summary["final_t"], rel=1e-4)
    assert await _number(page, "c-accuracy") == pytest.approx(train["accuracy"], rel=1e-3)
    loss = await page.evaluate(_text("c-loss"))
    assert loss.startswith(f"at t={summary['final_t']:.5g} (final reports); "), loss
    achieved, asked = await _pair(page, "c-rate")
    assert float(achieved) == pytest.approx(summary["rate_per_node_achieved"], rel=1e-3)
    assert asked == summary["rate_per_node_asked"]
    achieved, asked = await _pair(page, "c-network")
    assert float(achieved) == pytest.approx(summary["rate_network_achieved"], rel=1e-3)
    assert asked == summary["rate_network_asked"]
    assert summary["target"] == {"accuracy": 0.999}
    assert summary["t_target"] is None  # out of reach: the run stopped on its timeout
    assert await page.evaluate(_text("c-teps")) == "target accuracy 0.999"
    assert await page.evaluate(_text("c-fresh-sub")) == "every node sent its final report"
    assert await page.evaluate(_text("c-alive")) == "4 / 4"
    for card in ("error-panel", "card-error", "card-drift"):
        assert await _hidden(page, card), card
    row = await page.evaluate(
        "[...document.querySelector('#runs-table tbody tr.current').children]"
        ".map(td => td.textContent)"
    )
    assert row[0] == f"{summary['run_id']} (this run, over)"
    assert row[1] == summary["algorithm"].upper() == "A2CID2"
    assert int(row[3]) == summary["exact_points"]
    assert float(row[4]) == pytest.approx(summary["final_t"], rel=1e-3)
    assert float(row[5]) == pytest.approx(train["accuracy"], rel=1e-3)
    assert row[6] == "–"
    # The verdict needs the band, which the run waited for: both are drawn.
    await _wait(page, "window.__dash.trainBand() > 0", log)
    verdict = await page.evaluate(_text("training-verdict"))
    word = {True: "typical", False: "ATYPICAL", None: "unknown"}[train["agreement"]["typical"]]
    assert word in verdict, verdict


async def test_the_page_of_a_training_run_agrees_with_its_summary(tmp_path: Path) -> None:
    need(CHROMIUM)
    need("mosquitto")
    port = free_port()
    argv = [
        sys.executable, "-m", "continuized.cli.app", "up", *TRAINING,
        "--json", str(tmp_path / "run.json"), "--metrics-file", str(tmp_path / "run.jsonl"),
        "--log-dir", str(tmp_path / "logs"), "--quiet",
        "--dashboard-port", str(port), "--dashboard-runs-dir", str(tmp_path / "runs"),
        "--hold", "900",
    ]  # fmt: skip
    log = tmp_path / "up.log"
    proc = await spawn(argv, log=log)
    url = f"http://127.0.0.1:{port}/"
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        await _wait_running(url, log)
        async with chromium_tab() as tab:
            page = tab.page
            await page.goto(url)
            await _wait(page, "window.__dash && window.__dash.graphNodes() === 4", log)
            await _check_training_live(page, log)
            await page.screenshot(
                path=str(ARTIFACTS / "dashboard-training-live.png"), full_page=True
            )
            deadline = time.monotonic() + 200
            while not (tmp_path / "run.json").is_file():
                assert proc.returncode is None, _tail(log)
                assert time.monotonic() < deadline, "the run did not finish"
                await asyncio.sleep(0.5)
            await asyncio.sleep(0.5)
            summary = json.loads((tmp_path / "run.json").read_text())
            await _check_training_finished(page, summary, log)
            await page.screenshot(
                path=str(ARTIFACTS / "dashboard-training-finished.png"), full_page=True
            )
            swap = ("net::ERR_CONNECTION_REFUSED", "net::ERR_INCOMPLETE_CHUNKED_ENCODING")
            errors = [e for e in tab.errors() if not e[1].endswith(swap)]
            assert errors == []
        api = await _held_summary(url, log)
        named = [*TRAINING_KEYS.values(), "target", "rate_per_node_achieved", "rate_network_asked"]
        assert {k: api[k] for k in named} == {k: summary[k] for k in named}
        assert api["training"] == summary["training"]
        assert api["algorithm"] == summary["algorithm"]
        assert api["t"] == summary["final_t"]
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C ends the hold
            try:
                await asyncio.wait_for(proc.wait(), timeout=30)
            finally:
                await stop_process(proc)
