"""A sequential run of gossip with churn: leaves and joins at set times, views switched exactly.

This is the sequential model the live cluster must equal (the replay oracle of the churn
tests, and the engine of ``benchmarks/bench_churn.py``). It uses only the core functions the
nodes call: each node's :class:`~gossip.model.ledger.Ledger`,
:func:`gossip.model.jumps.edge_flow_values`, and :func:`gossip.exchange.membership.carry_ledger` at
every view switch (the settlement rule is stated once, in :mod:`gossip.exchange.membership`).

Activations form a rate-1 Poisson process over the current view's edges (edge e at rate
``P_e``), times in units of t. A change at time ``T_e`` starts view k+1 there: every member
carries its ledger over (a leaver's edges settled, a joiner added with its value and zero
rows), then the activations go on with the new view's edges and parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from continuized.gossip.errors import ConfigError
from continuized.gossip.exchange.membership import View, carry_ledger, join_view, leave_view
from continuized.gossip.model.jumps import edge_flow_values
from continuized.gossip.model.ledger import Ledger

__all__ = ["Change", "ChurnRun", "run_churn"]


@dataclass(frozen=True, slots=True)
class Change:
    """A membership change at time ``t``: ``leave`` of ``node``, or ``join`` of ``node`` with
    ``value`` attached to ``neighbors``."""

    kind: str
    t: float
    node: int
    value: float = 0.0
    neighbors: tuple[int, ...] = ()


@dataclass(slots=True)
class ChurnRun:
    """The record of a run: on the time grid, the error to the members' mean and the sums.

    ``error[i] = sum over members of 1/2 (x_v - mean)^2`` at ``times[i]``, with ``mean`` the
    mean of the current members' *initial* values; ``sum_x``, ``sum_z`` and ``target`` are the
    members' sums of ``x``, ``z`` and of initial values. ``jumps`` lists every jump as
    ``(T, view number, u, v)``; ``views`` every view used.
    """

    times: list[float] = field(default_factory=list)
    error: list[float] = field(default_factory=list)
    sum_x: list[float] = field(default_factory=list)
    sum_z: list[float] = field(default_factory=list)
    target: list[float] = field(default_factory=list)
    members: list[int] = field(default_factory=list)
    jumps: list[tuple[float, int, int, int]] = field(default_factory=list)
    views: list[View] = field(default_factory=list)
    ledgers: dict[int, Ledger] = field(default_factory=dict)

    def t_eps(self, eps: float, after: float = 0.0) -> float:
        """Return the first grid time ``>= after`` from which ``error <= eps`` (inf if none)."""
        for t, e in zip(self.times, self.error, strict=True):
            if t >= after and e <= eps:
                return t
        return math.inf


def _switch(view: View, change: Change, ledgers: dict[int, Ledger]) -> View:
    if change.kind == "leave":
        new = leave_view(view, change.node, change.t)
    elif change.kind == "join":
        new = join_view(view, change.node, change.neighbors, change.t)
    else:
        raise ConfigError(f"unknown change {change.kind!r}; valid: leave, join")
    for m in new.members:
        if m in ledgers:
            ledgers[m], _ = carry_ledger(ledgers[m], view, new, m)
    if change.kind == "leave":
        del ledgers[change.node]
    else:
        edges = [k for k, _ in new.incident(change.node)]
        ledgers[change.node] = Ledger([change.value], edges, new.eta, t0=change.t)
    return new


def _record(run: ChurnRun, view: View, ledgers: dict[int, Ledger], t: float) -> None:
    xs, zs, x0 = [], [], []
    for m in view.members:
        x, z = ledgers[m].state_values(t)
        xs.append(x[0])
        zs.append(z[0])
        x0.append(float(ledgers[m].initial[0]))
    mean = math.fsum(x0) / len(x0)
    run.times.append(t)
    run.error.append(0.5 * math.fsum((x - mean) ** 2 for x in xs))
    run.sum_x.append(math.fsum(xs))
    run.sum_z.append(math.fsum(zs))
    run.target.append(math.fsum(x0))
    run.members.append(len(xs))


def run_churn(
    view: View,
    values: Sequence[float],
    changes: Sequence[Change],
    t_end: float,
    rng: np.random.Generator,
    grid: Iterable[float],
) -> ChurnRun:
    """Run gossip from view 0 with ``values`` (one per member, in member order) to ``t_end``.

    Parameters
    ----------
    view : View
        The first view (its ``start`` is the run's start).
    values : sequence of float
        The members' initial values.
    changes : sequence of Change
        Leaves and joins, applied in time order at their ``t``.
    t_end : float
        End of the run, units of t.
    rng : numpy Generator
        The activations' randomness.
    grid : sequence of float
        The times at which the error and sums are recorded.

    Examples
    --------
    >>> import numpy as np
    >>> from continuized.gossip.exchange.membership import first_view
    >>> v0 = first_view(4, [(0, 1), (1, 2), (2, 3)])
    >>> run = run_churn(v0, [4.0, 0.0, 0.0, 0.0], [Change("leave", 5.0, 3)], 50.0,
    ...                 np.random.default_rng(0), [49.0])
    >>> round(run.sum_x[-1], 9), run.members[-1]
    (4.0, 3)
    """
    if len(values) != len(view.members):
        raise ConfigError(f"need {len(view.members)} values (one per member), got {len(values)}")
    ledgers = {
        m: Ledger([float(x)], [k for k, _ in view.incident(m)], view.eta, t0=view.start)
        for m, x in zip(view.members, values, strict=True)
    }
    run = ChurnRun(views=[view])
    pending = sorted(changes, key=lambda c: c.t)
    marks = sorted(float(g) for g in grid)
    t = view.start
    cumulative = np.cumsum(view.probs)
    while True:
        t_next = t + rng.exponential(1.0)
        while marks and marks[0] <= min(t_next, t_end):
            if pending and pending[0].t <= marks[0]:
                break
            _record(run, view, ledgers, marks.pop(0))
        if pending and pending[0].t <= min(t_next, t_end):
            change = pending.pop(0)
            view = _switch(view, change, ledgers)
            run.views.append(view)
            cumulative = np.cumsum(view.probs)
            t = change.t  # memoryless: the clocks restart at the switch with the new edges
            continue
        if t_next > t_end:
            break
        t = t_next
        k = min(
            int(np.searchsorted(cumulative, rng.random() * cumulative[-1])), len(view.edges) - 1
        )
        u, v = view.edges[k]
        edge = view.ids[k]
        xu, _ = ledgers[u].state_values(t)
        xv, _ = ledgers[v].state_values(t)
        dx, dz = edge_flow_values(xu, xv, view.c)
        ledgers[u].add_values(edge, dx, dz, t)
        ledgers[v].add_values(edge, dx, dz, t, sign=-1.0)
        run.jumps.append((t, view.number, u, v))
    while marks and marks[0] <= t_end:
        _record(run, view, ledgers, marks.pop(0))
    run.ledgers = ledgers
    return run
