"""How long a secure run's start waits for its CurveZMQ handshakes.

After the bootstrap, the nodes of a secure run dial their neighbours, and every dial between
two processes is a CurveZMQ handshake (both ends dial: two per edge). Nodes of one host
process dial each other over ZeroMQ's ``inproc`` transport, which has no handshake (the node's
rule, in ``node.transport.colocation``). So the handshakes a start waits for are those of the edges
between processes, which the coordinator tells from the registrations: a node registers its
process id and its address, and two nodes are in one process when both are the same.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from urllib.parse import urlsplit

import numpy as np
from numpy.typing import NDArray

__all__ = ["HANDSHAKE_SECONDS", "handshake_wait", "process_of"]

HANDSHAKE_SECONDS = 0.002
"""CPU seconds of one CurveZMQ handshake, both ends (libsodium; 1.6 to 1.9 ms measured on a
2-core x86 machine). 2,048 secure nodes on 2 cores, every link over TCP, spent 6.7 s of CPU in
handshakes, started behind on their clocks when the start did not wait for them, and never
caught up (19,696 activations in 20 s at 3,000/s; 58,769 with the handshakes waited for)."""


def process_of(address: str, pid: int) -> tuple[str, int]:
    """The process a node registered from: its address's host and its process id."""
    return urlsplit(address).hostname or "", pid


def handshake_wait(
    edges: NDArray[np.int64], processes: Sequence[tuple[str, int]], cores: int | None = None
) -> float:
    """Seconds of the start to leave for the handshakes of the edges between processes.

    ``edges`` are the topology's ``(i, j)`` pairs, ``processes[i]`` node i's
    :func:`process_of`. The handshakes share this machine's ``cores`` (default: all of them):
    on one machine, as ``gossip up`` runs, that is what they take; on many, more than they
    need, by little for a small cluster.

    Examples
    --------
    >>> edges = np.array([[0, 1], [1, 2], [2, 3]])
    >>> handshake_wait(edges, [("a", 1), ("a", 1), ("a", 2), ("b", 2)], cores=2)
    0.004
    """
    if len(edges) == 0:
        return 0.0
    numbers: dict[tuple[str, int], int] = {}
    owner = np.array([numbers.setdefault(p, len(numbers)) for p in processes], dtype=np.int64)
    crossing = int(np.count_nonzero(owner[edges[:, 0]] != owner[edges[:, 1]]))
    return HANDSHAKE_SECONDS * 2 * crossing / (cores or os.cpu_count() or 1)
