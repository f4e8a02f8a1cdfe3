"""The dashboard's HTTP server: the page, its JSON API, the live stream and ``/metrics``.

Routes (all ``GET``; the server is read-only and answers 405 to anything else):

=================================  ==========================================================
``/``                              the page (``coordinator/dashboard/static/index.html``)
``/static/<file>``                 its script and style sheet
``/vendor/plotly.min.js``          plotly.js from the installed ``plotly`` wheel (no CDN); without
                                   plotly (the ``dashboard`` extra), ``static/no-charts.js``:
                                   the page works and each chart says what to install
``/api/summary``                   contract C4: reached, t, error, t_eps, mass_drift_rel, ...
                                   as the header shows them (:func:`~.views.headline`)
``/api/snapshot``                  everything the page draws, consistent with a feed ``seq``
``/api/state``                     the coordinator's full :meth:`ClusterState.snapshot`
``/api/nodes``                     every node's latest report (dicts)
``/api/layout``                    node positions and edges of the network view
``/api/runs``                      the runs' metadata
``/api/runs/<id>.csv`` / ``.jsonl``  one run's error history, as a download
``/api/runs/<id>/band``            the simulator's 5-95% band for that run
``/api/stream``                    server-sent events: ``batch``, ``reset``, ``band``
``/metrics``                       Prometheus text format
=================================  ==========================================================

With a token configured, ``/api/*`` and ``/metrics`` need it, as ``?token=...``, an
``Authorization: Bearer ...`` header or an ``X-Gossip-Token`` header. The page and its static
files are public (they hold no data), so a browser opened on ``/?token=...`` can load them and
the page passes the token on to the API.
"""

from __future__ import annotations

import asyncio
import hmac
import importlib.util
import json
import logging
import math
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from continuized.coordinator.dashboard.band import BandKeeper
from continuized.coordinator.dashboard.feed import (
    Client,
    Feed,
    membership_events,
    opt_view,
    training_view,
)
from continuized.coordinator.dashboard.layout import GraphLayout, graph_layout
from continuized.coordinator.dashboard.prometheus import make_registry
from continuized.coordinator.dashboard.runs import RunArchive, RunRecord, run_problem
from continuized.coordinator.dashboard.views import (
    NODE_FIELDS,
    cluster_counters,
    headline,
    node_row,
    stale_after,
)
from continuized.coordinator.figures.state import ClusterState
from continuized.gossip.errors import ConfigError, MissingExtraError, require_extra

__all__ = ["STATIC_DIR", "Dashboard", "plotly_js_path", "serve"]

_log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
"""The page's own files (HTML, JS, CSS), shipped as package data of ``coordinator``."""

_KEEPALIVE = 15.0  # seconds between SSE comments that keep proxies from closing the stream
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def plotly_js_path() -> Path:
    """Return the path of ``plotly.min.js`` inside the installed plotly package.

    Raises
    ------
    ConfigError
        If the plotly package has no bundled plotly.js (a broken or unusual installation).
    """
    # Located without importing plotly: its Python side is not needed, only the bundled file.
    require_extra("dashboard", ["plotly"], "the dashboard")
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the plotly package is not installed (pip install plotly)")
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise ConfigError(
            f"plotly.js not found at {path}; reinstall the plotly package (pip install plotly)"
        )
    return path


def _charts_script() -> Path:
    """plotly.js, or where plotly is not installed the page's stand-in that says so (logged)."""
    try:
        return plotly_js_path()
    except MissingExtraError as exc:
        _log.warning("%s; serving the dashboard without its charts", exc)
        return STATIC_DIR / "no-charts.js"


class Dashboard:
    """The dashboard of one coordinator: the feed, the run archive and the aiohttp app.

    Parameters
    ----------
    state : ClusterState
        The coordinator's state (read only).
    token : str, optional
        Access token for the API and ``/metrics``; ``None`` or ``""`` for open access.
    runs_dir : Path, optional
        Directory where runs are saved as JSONL and read back (to overlay earlier runs).
    interval : float
        Seconds between live batches.
    band_runs : int
        Most simulated runs behind the band; 0 disables the band.
    """

    def __init__(
        self,
        state: ClusterState,
        token: str | None = None,
        runs_dir: Path | None = None,
        interval: float = 0.25,
        band_runs: int = 32,
    ) -> None:
        self.state = state
        self.token = token or None
        self.archive = RunArchive(runs_dir)
        self.bands = BandKeeper(state, self.archive, band_runs)
        self.feed = Feed(state, self.archive, interval, on_tick=self.bands.maybe_start)
        self.bands.on_ready = lambda run_id: self.feed.broadcast(
            "band", json.dumps({"run_id": run_id})
        )
        self.registry = make_registry(state, self._feed_figures)
        self._layout: tuple[str, GraphLayout] | None = None
        self._plotly = _charts_script()

    # -- app -----------------------------------------------------------------------------------

    def app(self) -> web.Application:
        """Build the aiohttp application (routes and the token check)."""
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/", self._index)
        app.router.add_static("/static/", STATIC_DIR, append_version=False)
        app.router.add_get("/vendor/plotly.min.js", self._plotly_js)
        app.router.add_get("/api/summary", self._summary)
        app.router.add_get("/api/snapshot", self._snapshot)
        app.router.add_get("/api/state", self._state)
        app.router.add_get("/api/nodes", self._nodes)
        app.router.add_get("/api/layout", self._layout_view)
        app.router.add_get("/api/runs", self._runs)
        app.router.add_get(r"/api/runs/{run_id:[^/]+}.{fmt:csv|jsonl}", self._download)
        app.router.add_get("/api/runs/{run_id}/band", self._band_view)
        app.router.add_get("/api/stream", self._stream)
        app.router.add_get("/metrics", self._metrics)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        path = request.path
        if self.token and (path.startswith("/api/") or path == "/metrics"):
            given = (
                request.query.get("token")
                or request.headers.get("X-Gossip-Token")
                or _bearer(request.headers.get("Authorization", ""))
            )
            if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
                return web.json_response(
                    {
                        "error": "missing or wrong token; pass ?token=... or "
                        "'Authorization: Bearer ...'"
                    },
                    status=401,
                )
        return await handler(request)

    # -- page and assets -----------------------------------------------------------------------

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    async def _plotly_js(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(self._plotly, headers={"Cache-Control": "max-age=86400"})

    # -- JSON API ------------------------------------------------------------------------------

    async def _summary(self, request: web.Request) -> web.StreamResponse:
        return _json(self.headline(time.time()))

    def headline(self, now: float) -> dict[str, Any]:
        """The run's figures as the header shows them (:func:`~.views.headline`)."""
        return headline(self.state, now, self.feed.rate_achieved)

    async def _state(self, request: web.Request) -> web.StreamResponse:
        return _json(self.state.snapshot())

    async def _nodes(self, request: web.Request) -> web.StreamResponse:
        now = time.time()
        nodes = self.state.nodes
        return _json([nodes[k].as_dict(now, self.state.alive_timeout) for k in sorted(nodes)])

    async def _layout_view(self, request: web.Request) -> web.StreamResponse:
        layout = self.layout()
        return _json(layout.as_dict() if layout is not None else None)

    async def _runs(self, request: web.Request) -> web.StreamResponse:
        return _json([self.run_meta(r) for r in self.archive.records.values()])

    def run_meta(self, record: RunRecord) -> dict[str, Any]:
        """A run's metadata; for the live run, its progress as :meth:`headline`.

        The archive follows the state on the feed's ticks, so between two ticks its copy of the
        live run lags; the header (``/api/summary``) and the Runs table must agree, so both
        read the live run's t, error, t_eps, reached and points from the state itself (a
        training run's row adds its ``accuracy`` and ``t_target``).
        """
        meta = record.meta()
        state = self.state
        if record.live and record.run_id == state.run_id:
            summary = self.headline(time.time())
            for key in ("t", "error", "t_eps", "reached", "points"):
                meta[key] = summary[key]
            if state.training is not None:
                meta["accuracy"] = summary["training"]["accuracy"]
                meta["t_target"] = summary["t_target"]
        return meta

    async def _download(self, request: web.Request) -> web.StreamResponse:
        record = self._record(request.match_info["run_id"])
        fmt = request.match_info["fmt"]
        body = record.to_csv() if fmt == "csv" else record.to_jsonl()
        content_type = "text/csv" if fmt == "csv" else "application/x-ndjson"
        return web.Response(
            text=body,
            content_type=content_type,
            headers={"Content-Disposition": f'attachment; filename="run-{record.run_id}.{fmt}"'},
        )

    async def _band_view(self, request: web.Request) -> web.StreamResponse:
        record = self._record(request.match_info["run_id"])
        return _json(
            {
                "run_id": record.run_id,
                "status": record.band_status,
                "band": record.band.as_dict() if record.band is not None else None,
            }
        )

    def _record(self, run_id: str) -> RunRecord:
        record = self.archive.records.get(run_id)
        if record is None:
            known = ", ".join(self.archive.records) or "none yet"
            raise web.HTTPNotFound(
                text=json.dumps({"error": f"no run {run_id!r}; known runs: {known}"}),
                content_type="application/json",
            )
        return record

    async def _snapshot(self, request: web.Request) -> web.StreamResponse:
        return _json(self.page_snapshot(time.time()))

    def page_snapshot(self, now: float) -> dict[str, Any]:
        """Return everything the page draws, consistent with feed batch ``seq``."""
        state = self.state
        layout = self.layout()
        runs = []
        problem = run_problem(state)
        for record in self.archive.records.values():
            # Earlier runs (from runs_dir) are overlaid only when they are comparable: the same
            # graph and the same quantity as the live run (averaging, or the same problem),
            # whatever the algorithm.
            comparable = record.graph == state.graph and record.problem == problem
            if state.graph and not comparable and not record.live:
                continue
            meta = self.run_meta(record)
            meta["xy"] = [[_num(p[0]), _num(p[1])] for p in record.points]
            meta["exact"] = [[_num(p[0]), _num(p[1])] for p in record.exact]
            meta["band"] = record.band.as_dict() if record.band is not None else None
            runs.append(meta)
        return {
            "seq": self.feed.seq,
            "now": now,
            "cluster": state.cluster,
            "graph": state.graph,
            "eps": state.eps,
            "rate": state.rate,
            "epoch": _num(state.epoch) if state.epoch is not None else None,
            "params": _params(state),
            "quantities": state.quantities.as_dict() if state.quantities is not None else None,
            "summary": self.headline(now),
            "counters": cluster_counters(state, now, self.feed.rate_achieved),
            "alive_timeout": state.alive_timeout,
            "stale_after": stale_after(state),
            "node_fields": list(NODE_FIELDS),
            "dim": _dim(state),
            "nodes": [node_row(state.nodes[k]) for k in sorted(state.nodes)],
            "layout": layout.as_dict() if layout is not None else None,
            "edge_levels": self.feed.edge_levels,
            "membership": membership_events(state),
            "live_run": self.archive.live.run_id if self.archive.live is not None else "",
            "runs": runs,
            # Optimization runs: the task (x*, parameters) and [t, distance, gap, consensus,
            # dual_drift, wall] rows over the whole run; the error curve above is then the
            # distance to x*. Feed batches carry the rows that follow (``opt``).
            "optimization": opt_view(state, self.feed.opt_sent),
            # Training runs: the scored points so far (batches carry the ones that follow,
            # ``train``) and the simulator's band of accuracy, loss and consensus.
            "training": training_view(state, self.feed.train_sent),
        }

    def layout(self) -> GraphLayout | None:
        """The network view's layout, computed once per topology (None before it is known)."""
        topo = self.state.topology
        if topo is None:
            return None
        if self._layout is None or self._layout[0] != topo.spec:
            self._layout = (topo.spec, graph_layout(topo))
        return self._layout[1]

    # -- live stream ---------------------------------------------------------------------------

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # nginx: do not buffer the stream
            }
        )
        await response.prepare(request)
        client = Client()
        self.feed.clients.add(client)
        try:
            await response.write(b"retry: 2000\n\n")
            while True:
                try:
                    async with asyncio.timeout(_KEEPALIVE):
                        event, data = await client.queue.get()
                except TimeoutError:
                    await response.write(b": keepalive\n\n")
                    continue
                await response.write(f"event: {event}\ndata: {data}\n\n".encode())
                if client.overflowed:
                    # The reset has been sent; the tab reconnects with a fresh snapshot.
                    break
        except (ConnectionResetError, ConnectionError):
            pass  # the tab went away
        finally:
            self.feed.clients.discard(client)
        return response

    # -- metrics -------------------------------------------------------------------------------

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _feed_figures(self) -> tuple[float | None, int, int]:
        return self.feed.rate_achieved, len(self.feed.clients), self.feed.batches_sent

    # -- lifetime ------------------------------------------------------------------------------

    async def run(
        self, host: str, port: int, on_ready: Callable[[str], None] | None = None
    ) -> None:
        """Serve on ``host:port`` until cancelled; call ``on_ready(url)`` once listening."""
        try:
            sock = socket.create_server((host, port), family=_family(host), reuse_port=False)
        except OSError as exc:
            raise ConfigError(
                f"dashboard cannot listen on {host}:{port}: {exc.strerror or exc}; "
                "choose another --dashboard-port"
            ) from None
        runner = web.AppRunner(
            self.app(), access_log=None, handle_signals=False, shutdown_timeout=1.0
        )
        await runner.setup()
        try:
            site = web.SockSite(runner, sock)
            await site.start()
            bound = sock.getsockname()[1]
            shown = f"[{host}]" if ":" in host else host
            url = f"http://{shown}:{bound}/"
            _log.info("dashboard at %s", url)
            async with asyncio.TaskGroup() as tg:

                def spawn(coro: Awaitable[None], name: str) -> None:
                    tg.create_task(_awaited(coro), name=name)

                self.bands.spawn = spawn
                tg.create_task(self.feed.run(), name="dashboard-feed")
                if on_ready is not None:
                    on_ready(url)
        finally:
            self.bands.spawn = None
            self.archive.close(self.state)
            await runner.cleanup()


async def serve(
    state: ClusterState,
    host: str = "127.0.0.1",
    port: int = 8080,
    token: str | None = None,
    *,
    runs_dir: str | Path | None = None,
    interval: float = 0.25,
    band_runs: int = 32,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the dashboard for ``state`` on ``host:port`` until cancelled (contract C4).

    Parameters
    ----------
    state : ClusterState
        The coordinator's state; the dashboard only reads it.
    host, port : str, int
        Where to listen (``127.0.0.1`` unless the user asks otherwise); port 0 picks a free port.
    token : str, optional
        If set, ``/api/*`` and ``/metrics`` require it (``?token=``, a Bearer header, or
        ``X-Gossip-Token``).
    runs_dir : path, optional
        Save finished runs there as JSONL and overlay the runs found there.
    interval : float
        Seconds between live batches to the page.
    band_runs : int
        Most simulated runs behind the expected band (0: no band).
    on_ready : callable, optional
        Called with the dashboard URL once it is listening.

    Raises
    ------
    ConfigError
        If the address cannot be bound.
    """
    dashboard = Dashboard(
        state,
        token=token,
        runs_dir=Path(runs_dir) if runs_dir is not None else None,
        interval=interval,
        band_runs=band_runs,
    )
    await dashboard.run(host, port, on_ready)


async def _awaited(coro: Awaitable[None]) -> None:
    await coro


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _bearer(header: str) -> str:
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def _json(data: Any) -> web.Response:
    return web.Response(
        text=json.dumps(data, allow_nan=False),
        content_type="application/json",
        headers={"Cache-Control": "no-cache"},
    )


def _num(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _params(state: ClusterState) -> dict[str, Any] | None:
    p = state.params
    if p is None:
        return None
    return {
        "algorithm": p.algorithm.value,
        "eta": p.eta,
        "c": p.c,
        "theta": p.theta,
        "bound_factor": p.bound_factor,
    }


def _dim(state: ClusterState) -> int:
    if state.initial:
        return len(state.initial[0])
    for view in state.nodes.values():
        if view.x:
            return len(view.x)
    return 1
