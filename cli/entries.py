"""The modules this package starts as processes: ``gossip up``'s node processes and fork server.

They are the command line's own modules, so the command line names them and hands them to
the coordinator's launcher (:class:`~coordinator.local.node_commands.NodeEntries`), which names
no module above its layer. Each is started as ``python -P -m MODULE``: the current folder is
not put on the import path, so a user's own ``cli/`` package or ``node.py`` cannot shadow it.
"""

from __future__ import annotations

from continuized.coordinator.local.node_commands import NodeEntries

__all__ = ["NODE_ENTRIES"]

_PACKAGE = __name__.rpartition(".")[0]

NODE_ENTRIES = NodeEntries(app=f"{_PACKAGE}.app", fork_server=f"{_PACKAGE}.forkserver")
"""The command line's entry module and the node fork server, by their installed names."""
