"""Warming a node process's exchange code before t = 0.

CPython 3.11 specializes a function's bytecode only once it has run a few times, and a node's
first exchanges also pay for first allocations (reply caches, sample buffers, the trace). In
a cluster asked for a rate near what its machine carries, every node pays that at once, right
at t = 0: the first exchanges are slow, ticks wait for their lock, crossing requests get
refused, and the backlog outlasts the short runs it matters most to. On line:30 at 4000/s,
one process per node, six runs with the warm-up against six without, alternating
(``benchmarks/bench_cluster.py``, docs/changelog.md): 88-100% of the exact points inside the
simulator's band in five runs of six, against 3-85%.

So each node process, before its first tick, runs :data:`WARM_UP_EXCHANGES` exchanges between
two throwaway exchangers: the same functions its live exchanges call, with a trace, on values
of its own dimension, on state that is then dropped. That costs 10 to 20 ms of CPU per process
during the start delay, and changes nothing the node does afterwards.

An optimization node also answers ``grad f^*(0)`` once: its dual ``y`` starts at 0, so that is
the answer its first exchange needs, and from no previous answer it is the slow one (Newton
from zero, 10 to 20 steps for logistic regression). Its solver keeps that answer as the warm
start of the next call, as it would have after the first exchange.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.trace import Trace
from continuized.gossip.exchange.vocabulary import Link, TimeBase
from continuized.gossip.model.ledger import Ledger

__all__ = ["WARM_UP_EXCHANGES", "warm_up"]

WARM_UP_EXCHANGES = 200
"""Exchanges run by :func:`warm_up`: enough for the interpreter to specialize the path (it
does after a few dozen runs), for about 10 ms of CPU."""


def warm_up(dim: int = 1, exchanges: int = WARM_UP_EXCHANGES, problems: Sequence[Any] = ()) -> int:
    """Run ``exchanges`` exchanges of ``dim``-vectors between two throwaway exchangers, both
    ends in this process, with no I/O; return how many completed (all of them).

    ``problems``: the process's nodes' local problems (optimization), each asked for
    ``grad f^*(0)`` once (see the module docstring).
    """
    for problem in problems:
        problem.grad_conjugate(np.zeros(dim))
    timebase = TimeBase(0.0, 1.0)
    traces = [Trace(0.5, 0.0), Trace(0.5, 0.0)]
    ends = [
        Exchanger(
            v,
            [Link(0, 1 - v, 1.0)],
            Ledger([float(v)] * dim, [0], eta=1e-3),
            0.05,
            timebase,
            timeout=1.0,
            trace=traces[v],
        )
        for v in (0, 1)
    ]
    done = 0
    for i in range(exchanges):
        initiator, server = ends[i % 2], ends[1 - i % 2]  # both roles, on both ends
        now = 1.0 + i
        out = initiator.initiate(0, now)
        if out is None:
            continue
        answer = server.receive(out.frame, now + 0.1, b"route")
        if answer:
            initiator.receive(answer, now + 0.2)
            done += 1
        for trace in traces:  # as the reports do: the samples do not pile up
            trace.take()
    return done
