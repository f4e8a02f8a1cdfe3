"""Getting a node process ready before t = 0: its set-up, and the warm-up of its exchange code.

:func:`set_up` loads what a node needs for its run (its problem, or its shard and model) from
its draft Bootstrap, before the node registers ready (:func:`node.registration.register_ready`):
a training node's set-up takes seconds on a loaded machine, and the coordinator fixes t = 0
only once every node is ready. The warm-up, below, runs then too.

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
of its own dimension (at most :data:`WARM_UP_DIM`), on state that is then dropped. That costs
10 to 70 ms of CPU per process before the node reports ready (:mod:`node.host`), and changes
nothing the node does afterwards.

The dimension is capped: the interpreter specializes the same bytecode whatever the length of
the values, and past that the warm-up only costs. A training node's 4,810 parameters
(``mlp:64`` on digits) on the plain ledger took 2.9 s of CPU per process, and eight such
processes on two loaded cores started their clocks 9 to 10 s after t = 0 (a training node's
exchanges use another ledger, :class:`gossip.model.parameters.ParameterLedger`, anyway).

An optimization node also answers ``grad f^*(0)`` once: its dual ``y`` starts at 0, so that is
the answer its first exchange needs, and from no previous answer it is the slow one (Newton
from zero, 10 to 20 steps for logistic regression). Its solver keeps that answer as the warm
start of the next call, as it would have after the first exchange.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.trace import Trace
from continuized.gossip.exchange.vocabulary import Link, TimeBase
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.wire.schema import Bootstrap
from continuized.node.config import NodeConfig
from continuized.node.learner import load_learner
from continuized.node.problem import load_problem

__all__ = ["WARM_UP_DIM", "WARM_UP_EXCHANGES", "Setup", "set_up", "setup_key", "warm_up"]

WARM_UP_EXCHANGES = 200
"""Exchanges run by :func:`warm_up`: enough for the interpreter to specialize the path (it
does after a few dozen runs), for about 10 ms of CPU."""


@dataclass(frozen=True, slots=True)
class Setup:
    """What a node built for its run, its problem or its learner, and the Bootstrap's fields
    it was built from (:func:`setup_key`: a draft's, which the run's Bootstrap must match)."""

    key: tuple[Any, ...]
    problem: Any = None
    learner: Any = None


def setup_key(boot: Bootstrap) -> tuple[Any, ...]:
    """The fields of ``boot`` that :func:`set_up` reads."""
    return (
        *(boot.node_id, boot.n, boot.dim, boot.problem, boot.data, boot.split, boot.train),
        *(boot.seed, boot.lr, boot.momentum, boot.batch_size),
    )


def set_up(config: NodeConfig, boot: Bootstrap, made: Setup | None = None) -> Setup:
    """Load the node's problem (optimization) or its shard and model (training), as ``boot``
    names them (``config.data`` replaces its data source); or return ``made``, if it was made
    from the same fields (a draft of ``boot``).

    Raises
    ------
    ConfigError
        As :func:`node.problem.load_problem` and :func:`node.learner.load_learner`.
    """
    if made is not None and made.key == setup_key(boot):
        return made
    return Setup(
        setup_key(boot),
        problem=load_problem(boot, config.data) if boot.problem else None,
        learner=load_learner(boot, config.data) if boot.train else None,
    )


def set_up_all(
    configs: Sequence[NodeConfig], drafts: Sequence[Bootstrap | None]
) -> dict[int, Setup]:
    """Set up each node ``k`` that has a draft ``drafts[k]`` (:func:`set_up`), then warm up
    the process (:func:`warm_up`): what a host does before its nodes register ready."""
    made = {k: set_up(configs[k], boot) for k, boot in enumerate(drafts) if boot is not None}
    dim = next(boot.dim for boot in drafts if boot is not None)
    warm_up(dim, problems=[s.problem for s in made.values() if s.problem is not None])
    return made


WARM_UP_DIM = 64
"""Largest dimension of the warm-up's values: 70 ms of CPU (1: 27 ms; 4,810: 2.9 s)."""


def warm_up(dim: int = 1, exchanges: int = WARM_UP_EXCHANGES, problems: Sequence[Any] = ()) -> int:
    """Run ``exchanges`` exchanges of ``min(dim, WARM_UP_DIM)``-vectors between two throwaway
    exchangers, both ends in this process, with no I/O; return how many completed (all of them).

    ``problems``: the process's nodes' local problems (optimization), each asked for
    ``grad f^*(0)`` once (see the module docstring).
    """
    for problem in problems:
        problem.grad_conjugate(np.zeros(dim))
    dim = min(dim, WARM_UP_DIM)
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
