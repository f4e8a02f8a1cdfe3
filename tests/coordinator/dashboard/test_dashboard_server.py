"""The dashboard over real HTTP on loopback: API, token, downloads, live stream and /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from continuized.coordinator.dashboard.runs import RunRecord, parse_jsonl
from continuized.coordinator.dashboard.synthetic import SyntheticCluster
from continuized.coordinator.figures.records import ErrorPoint
from continuized.coordinator.figures.state import ClusterState
from continuized.gossip.errors import ConfigError


async def _get(url: str, **kwargs: Any) -> tuple[int, bytes, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.get(url, **kwargs) as resp:
        return resp.status, await resp.read(), dict(resp.headers)


async def test_summary_follows_contract_c4(
    start_dashboard: Callable[..., Any], cluster: SyntheticCluster
) -> None:
    state = cluster.new_state()
    cluster.feed(state)
    served = await start_dashboard(state)
    status, body, _ = await _get(served.url + "api/summary")
    assert status == 200
    summary = json.loads(body)
    assert set(summary) >= {
        "reached",
        "t",
        "error",
        "t_eps",
        "mass_drift_rel",
        "nodes_alive",
        "expected",
        "algorithm",
        "graph",
    }
    assert summary["nodes_alive"] == 25
    assert summary["expected"] == 25
    assert summary["algorithm"] == "arg"
    assert summary["graph"] == "grid:5x5"
    assert summary["error"] == pytest.approx(state.history[-1].error)


async def test_page_assets_and_plotly_come_from_the_server(
    start_dashboard: Callable[..., Any], cluster: SyntheticCluster
) -> None:
    served = await start_dashboard(cluster.new_state())
    status, page, _ = await _get(served.url)
    assert status == 200
    assert b"vendor/plotly.min.js" in page
    for asset in ("static/dashboard.js", "static/dashboard.css"):
        status, _, _ = await _get(served.url + asset)
        assert status == 200, asset
    status, js, headers = await _get(served.url + "vendor/plotly.min.js")
    assert status == 200
    assert len(js) > 1_000_000
    assert b"plotly" in js[:2000].lower()
    assert "javascript" in headers["Content-Type"]
    # Nothing the page loads may point outside the server (the LAN has no internet).
    for text in (page, (await _get(served.url + "static/dashboard.js"))[1]):
        assert b"http://" not in text
        assert b"https://" not in text


async def test_token_guards_the_data_but_not_the_page(
    start_dashboard: Callable[..., Any], cluster: SyntheticCluster
) -> None:
    served = await start_dashboard(cluster.new_state(), token="s3cret")
    assert (await _get(served.url))[0] == 200
    for path in ("api/summary", "api/snapshot", "metrics", "api/stream"):
        assert (await _get(served.url + path))[0] == 401, path
        assert (await _get(served.url + path + "?token=wrong"))[0] == 401, path
    assert (await _get(served.url + "api/summary?token=s3cret"))[0] == 200
    bearer = {"Authorization": "Bearer s3cret"}
    assert (await _get(served.url + "metrics", headers=bearer))[0] == 200
    assert (await _get(served.url + "api/summary", headers={"X-Gossip-Token": "s3cret"}))[0] == 200


async def test_the_server_is_read_only(
    start_dashboard: Callable[..., Any], cluster: SyntheticCluster
) -> None:
    served = await start_dashboard(cluster.new_state())
    async with aiohttp.ClientSession() as session:
        for method in ("POST", "PUT", "DELETE"):
            async with session.request(method, served.url + "api/summary") as resp:
                assert resp.status == 405, method


async def test_runs_download_as_csv_and_jsonl(
    start_dashboard: Callable[..., Any], cluster: SyntheticCluster
) -> None:
    state = cluster.new_state()
    for k in range(4):
        state.record(ErrorPoint(float(k), 0.5 / (k + 1), 0.0, 100.0 + k))
    served = await start_dashboard(state, interval=0.05)
    await asyncio.sleep(0.3)  # a few ticks copy the history into the run archive
    status, body, headers = await _get(served.url + "api/runs/run-a.csv")
    assert status == 200
    assert "attachment" in headers["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(body.decode())))
    assert [float(r[0]) for r in rows[1:]] == [0.0, 1.0, 2.0, 3.0]
    status, body, _ = await _get(served.url + "api/runs/run-a.jsonl")
    lines = [json.loads(line) for line in body.decode().splitlines()]
    assert lines[0]["type"] == "run"
    assert lines[0]["algorithm"] == "arg"
    assert [p["error"] for p in lines[1:]] == [0.5 / (k + 1) for k in range(4)]
    status, body, _ = await _get(served.url + "api/runs/nope.csv")
    assert status == 404
    assert b"run-a" in body


async def test_stream_sends_batches_with_new_points(
    start_dashboard: Callable[..., Any], cluster: SyntheticCluster
) -> None:
    state = cluster.new_state()
    cluster.feed(state)
    served = await start_dashboard(state, interval=0.05)
    events: list[tuple[str, dict[str, Any]]] = []
    async with aiohttp.ClientSession() as session, session.get(served.url + "api/stream") as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        event = ""
        async with asyncio.timeout(10):
            async for raw in resp.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    events.append((event, json.loads(line[6:])))
                    if event == "batch" and len(events) == 2:
                        cluster.feed(state)  # new reports and a new point arrive
                    if sum(len(d.get("points", [])) for _, d in events) >= 1:
                        break
    batches = [d for e, d in events if e == "batch"]
    assert batches, events
    assert [d["seq"] for d in batches] == sorted(d["seq"] for d in batches)
    last = batches[-1]
    assert last["points"][-1][0] == pytest.approx(state.history[-1].t)
    assert len(last["nodes"]) == 25


async def test_snapshot_holds_layout_nodes_and_runs(
    start_dashboard: Callable[..., Any], cluster: SyntheticCluster
) -> None:
    state = cluster.new_state()
    cluster.feed(state)
    served = await start_dashboard(state, interval=0.05)
    await asyncio.sleep(0.2)
    _status, body, _ = await _get(served.url + "api/snapshot")
    snap = json.loads(body)
    assert len(snap["layout"]["x"]) == 25
    assert len(snap["layout"]["edges"]) == 40
    assert len(snap["nodes"]) == 25
    assert snap["node_fields"][0] == "id"
    assert snap["live_run"] == "run-a"
    assert len(snap["runs"][0]["xy"]) == 1
    assert snap["params"]["algorithm"] == "arg"


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_metrics_parse_and_match_the_state(
    start_dashboard: Callable[..., Any], cluster: SyntheticCluster
) -> None:
    state = cluster.new_state()
    cluster.feed(state)
    state.nodes[4].counters["failed"] = 3
    state.nodes[4].counters["overdue"] = 2
    state.nodes[6].final = True
    served = await start_dashboard(state)
    status, body, headers = await _get(served.url + "metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    got = _samples(body.decode())
    assert got[("gossip_error", ())] == pytest.approx(state.error)
    assert got[("gossip_t", ())] == pytest.approx(state.t)
    assert got[("gossip_nodes_expected", ())] == 25
    assert got[("gossip_nodes_alive", ())] == state.nodes_alive() == 24
    assert got[("gossip_activations_total", ())] == state.activations()
    assert got[("gossip_rate_asked", ())] == 400.0
    assert got[("gossip_broker_connected", ())] == 1.0
    assert got[("gossip_reached", ())] == 0.0
    assert ("gossip_t_eps", ()) not in got  # unknown until reached: absent, not NaN
    assert got[("gossip_phase", (("gossip_phase", "running"),))] == 1.0
    assert got[("gossip_phase", (("gossip_phase", "done"),))] == 0.0
    info = (("algorithm", "arg"), ("cluster", "gossip"), ("graph", "grid:5x5"), ("run_id", "run-a"))
    assert got[("gossip_info", info)] == 1.0
    for node, view in state.nodes.items():
        key = (("name", view.name), ("node", str(node)))
        assert got[("gossip_node_value", key)] == pytest.approx(view.x[0])
        assert got[("gossip_node_t", key)] == pytest.approx(view.t)
        assert got[("gossip_node_alive", key)] == (0.0 if node == 6 else 1.0)
        for kind in ("initiated", "served", "retried", "failed", "rejected", "overdue"):
            exported = got[("gossip_node_exchanges_total", (("kind", kind), *key))]
            assert exported == view.counters.get(kind, 0)  # 0: not reported (older node)
        rtt = got[("gossip_node_rtt_seconds", (*key, ("quantile", "0.99")))]
        assert view.rtt_p99_ms is not None
        assert rtt == pytest.approx(view.rtt_p99_ms / 1000.0)
        lag = got[("gossip_node_jump_lag", (*key, ("quantile", "0.5")))]
        assert lag == view.lag_p50
    assert (
        got[
            (
                "gossip_node_exchanges_total",
                (("kind", "failed"), ("name", "synthetic-4"), ("node", "4")),
            )
        ]
        == 3.0
    )
    overdue = (("kind", "overdue"), ("name", "synthetic-4"), ("node", "4"))
    assert got[("gossip_node_exchanges_total", overdue)] == 2.0


async def test_a_busy_port_is_a_clear_config_error(
    start_dashboard: Callable[..., Any], cluster: SyntheticCluster
) -> None:
    served = await start_dashboard(cluster.new_state())
    port = int(served.url.rsplit(":", 1)[1].strip("/"))
    from continuized.coordinator.dashboard import serve

    with pytest.raises(ConfigError, match=f"127.0.0.1:{port}"):
        await serve(ClusterState(graph="line:2"), "127.0.0.1", port, None)


async def test_new_points_reach_the_snapshot_within_a_tick(
    start_dashboard: Callable[..., Any], cluster: SyntheticCluster
) -> None:
    state = cluster.new_state()
    served = await start_dashboard(state, interval=0.05)
    started = time.monotonic()
    cluster.feed(state)
    while time.monotonic() - started < 5:
        snap = json.loads((await _get(served.url + "api/snapshot"))[1])
        if snap["runs"] and snap["runs"][0]["xy"]:
            break
        await asyncio.sleep(0.02)
    assert snap["runs"][0]["xy"][0][1] == pytest.approx(state.history[0].error)
    assert not math.isnan(snap["summary"]["t"])


async def test_earlier_runs_of_the_same_graph_are_overlaid_from_runs_dir(
    start_dashboard: Callable[..., Any], cluster: SyntheticCluster, tmp_path: Path
) -> None:
    for run_id, graph in (("old-rg", "grid:5x5"), ("other-graph", "line:30")):
        old = RunRecord(run_id=run_id, graph=graph, algorithm="rg", eps=1e-6)
        old.points = [(0.0, 0.48, 0.0, 1.0), (50.0, 0.1, 0.0, 2.0)]
        (tmp_path / f"{run_id}.jsonl").write_text(old.to_jsonl())
    state = cluster.new_state()
    cluster.feed(state)
    served = await start_dashboard(state, runs_dir=tmp_path, interval=0.05)
    await asyncio.sleep(0.3)
    snap = json.loads((await _get(served.url + "api/snapshot"))[1])
    assert [r["run_id"] for r in snap["runs"]] == ["old-rg", "run-a"]
    assert snap["runs"][0]["xy"] == [[0.0, 0.48], [50.0, 0.1]]
    assert (await _get(served.url + "api/runs/other-graph.csv"))[0] == 200  # still downloadable
    # When the dashboard stops, the live run is saved next to them.
    served.task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await served.task
    assert parse_jsonl((tmp_path / "run-a.jsonl").read_text()).points


async def test_the_runs_table_and_the_header_agree_on_the_live_run(
    start_dashboard: Callable[..., Any], cluster: SyntheticCluster
) -> None:
    state = cluster.new_state()
    cluster.feed(state)
    # One feed tick at start, then none for the test's length: the archive's copy of the live
    # run is left behind while the state moves on and reaches eps.
    served = await start_dashboard(state, interval=3600.0)
    async with asyncio.timeout(10):
        while True:
            _, body, _ = await _get(served.url + "api/runs")
            if any(r["run_id"] == "run-a" for r in json.loads(body)):
                break
            await asyncio.sleep(0.05)
    for step in range(1, 6):
        cluster.feed(state, wall=time.time() + step)
    state.mark_reached(state.t, time.time())
    _, body, _ = await _get(served.url + "api/summary")
    summary = json.loads(body)
    _, body, _ = await _get(served.url + "api/runs")
    (live,) = [r for r in json.loads(body) if r["live"]]
    assert summary["reached"] is True
    assert live["run_id"] == state.run_id
    for key in ("t", "error", "t_eps", "reached"):
        assert live[key] == summary[key], key
    assert live["t_eps"] == pytest.approx(state.t_eps)
    assert live["points"] == len(state.history) == 6
    # The page's snapshot carries the same figures for the live run.
    _, body, _ = await _get(served.url + "api/snapshot")
    snap = json.loads(body)
    (page_live,) = [r for r in snap["runs"] if r["run_id"] == snap["live_run"]]
    for key in ("t", "error", "t_eps", "reached"):
        assert page_live[key] == snap["summary"][key], key
