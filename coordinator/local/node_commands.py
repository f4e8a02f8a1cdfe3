"""The local node processes of ``gossip up``: their command lines, sizes and report period.

Pure helpers of :mod:`coordinator.local.launcher` (and of the benchmarks that start clusters the
same way): what a node process is started with, how nodes are split over host-mode processes, and
how often each node reports so that the broker and the coordinator keep up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from continuized.coordinator.machine.children import python_module
from continuized.gossip.wire.access import host_sizes

__all__ = ["NodeEntries", "default_metrics_period", "node_argv", "node_command"]


@dataclass(frozen=True)
class NodeEntries:
    """The modules that ``gossip up`` runs, as ``python -P -m MODULE``, for its node processes.

    They belong to the command line, the layer above the coordinator: it passes them in
    (``cli.entries.NODE_ENTRIES``), so the coordinator names no module above its own.

    Attributes
    ----------
    app : str
        The command line's entry module: ``python -P -m APP node ...`` runs one node process.
    fork_server : str
        The node fork server's module (it imports the node code once, then forks each node
        process running ``APP``'s command line).
    """

    app: str
    fork_server: str


def node_command(
    coordinator: str, name: str, host: str, extra: Sequence[str] = (), port: int | None = None
) -> list[str]:
    """Return the ``gossip`` arguments of one local node process (without the program).

    With ``port`` the node binds that port (node i of a host process: ``port + i``), so that a
    restart comes back on the same address; without it, any free port.
    """
    where = (
        ["--host", host]
        if port is None
        else ["--bind", f"tcp://{host}:{port}", "--advertise", host]
    )
    return ["node", "--coordinator", coordinator, "--name", name, *where, *extra]


def node_argv(
    app: str,
    coordinator: str,
    name: str,
    host: str,
    extra: Sequence[str] = (),
    port: int | None = None,
) -> list[str]:
    """Return the command line of one local node process, run by entry module ``app``."""
    return python_module(app, *node_command(coordinator, name, host, extra, port))


# Reports a second from all the nodes together. A report costs about 1 ms of CPU all told, and
# 2,048 nodes at 3,000/s on 2 cores, reporting 2,000 times a second, fell behind on their
# clocks (2,322 activations a second); at 500 a second they kept up (2,884/s, 45 exact points
# in 20 s).
_REPORTS_PER_SECOND = 500.0
_REPORT_WAKEUPS_PER_SECOND = 100.0  # report wake-ups of node processes sharing one machine


def default_metrics_period(nodes: int, nodes_per_process: int = 1) -> float:
    """Seconds between two reports of each node of a cluster on this machine: at least 0.1,
    and longer for over 10 node processes or over 50 nodes.

    A report costs about 1 ms of CPU all told (its process's wake-up, the publish, the broker,
    the coordinator): 30 processes reporting every 0.1 s took a fifth of a two-core machine at
    3000 activations a second (docs/changelog.md). So the processes wake up about 100 times
    a second in all to report, and send about 500 reports a second in all at most. Reports
    further apart carry more exact samples each
    (:func:`gossip.exchange.trace.trace_step`). The processes are
    :func:`~gossip.wire.access.host_sizes`'.

    Examples
    --------
    >>> default_metrics_period(16), default_metrics_period(30), default_metrics_period(100)
    (0.16, 0.3, 1.0)
    >>> default_metrics_period(30, nodes_per_process=15), default_metrics_period(1024, 64)
    (0.1, 2.048)
    """
    processes = len(host_sizes(nodes, nodes_per_process))
    return max(0.1, nodes / _REPORTS_PER_SECOND, processes / _REPORT_WAKEUPS_PER_SECOND)
