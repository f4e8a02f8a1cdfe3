"""The live dashboard of a coordinator: a web page, a JSON API, a live stream and ``/metrics``.

The coordinator runs :func:`serve` inside its own TaskGroup when ``--dashboard-port`` is given::

    tg.create_task(serve(state, host, port, token), name="dashboard")

Modules
-------
server
    The aiohttp app, the token check and :func:`serve`.
feed
    Samples the :class:`~coordinator.figures.state.ClusterState` on a tick and batches live updates.
runs
    The live run and earlier ones; CSV and JSONL exports.
metrics
    The Prometheus collector.
band
    The simulator's expected error band, computed in a child process.
layout
    Node positions for the network view.
views
    Compact rows and counters for the page, and the header's figures.
"""

from continuized.coordinator.dashboard.server import Dashboard, serve

__all__ = ["Dashboard", "serve"]
