"""Decentralized optimization runs on the live cluster: the coordinator's side (the paper's Section
7).

Theory of operation
-------------------
An optimization run (``gossip up --problem logistic:0.01 --data breast-cancer --split
label:1``) is a gossip run whose nodes keep the dual pair ``(y_v, z_v)`` in place of ``(x_v,
z_v)``: both start at 0 (so the Plan's initial values are zero vectors of dimension ``d``),
mix exactly like ARG's pair with the dual ``eta``, and on an activation exchange ``g_v =
grad f_v^*(y_v(T))`` with a per-edge step ``s_e`` and the coupling ``c = gamma'``.

The coordinator never sends data. The Bootstrap carries the problem spec, the data spec, the
split and ``n``; each node loads its own shard (:mod:`node.problem`). The coordinator loads
the same public source only to compute, once, what the run needs centrally:

* the bounds ``mu`` (smallest over nodes) and ``L`` (largest), which fix the dual parameters
  (:mod:`gossip.dual`) and the per-edge steps sent in the Bootstrap;
* ``x*``, the minimiser of ``sum_v f_v``, and ``sum_v f_v`` itself, for the CHECK only.

From the nodes' reports (each ``x_v = grad f_v^*(y_v)``, the primal, and ``y_v``, ``z_v``,
which are not data) it measures (:class:`OptTracker`): ``sum_v |x_v - x*|^2`` (the run's
error: ``--until`` applies to it), the objective gap ``F(xbar) - F(x*)`` of the nodes'
average ``xbar``, the consensus distance ``sum_v |x_v - xbar|^2`` and the dual sums' drift
``|sum_v y_v| + |sum_v z_v|`` with every report mixed to a common t (both sums start at 0
and every jump is antisymmetric, so this is 0 up to rounding however messages are lost or
repeated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError, GossipError
from continuized.gossip.graph.spectral import GraphQuantities
from continuized.gossip.graph.topology import Topology
from continuized.gossip.model.mixing import mix

__all__ = ["OptPoint", "OptTask", "OptTracker", "prepare_task"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class OptTask:
    """What an optimization run fixes before any node registers.

    Attributes
    ----------
    problem, data, split : str
        The specs sent in every Bootstrap (``logistic:0.01``, ``breast-cancer``, ``label:1``).
    dim : int
        ``d``, the width of the data (of ``x``, ``y`` and ``z``).
    mu, L : float
        Strong convexity (smallest over nodes) and smoothness (largest over nodes).
    eta, c, theta : float
        Dual mixing rate, coupling ``gamma'`` and the theorem's rate.
    steps : tuple of float
        Per-edge step ``s_e``, in the topology's edge order.
    params : dict
        Every dual parameter, for the summary and the dashboard.
    x_star : ndarray of shape (d,) or None
        The minimiser, for the check only; ``None`` when the coordinator could not load the data.
    value_star : float or None
        ``sum_v f_v(x*)``.
    problems : object or None
        The network's :class:`gossip.problems.ProblemSet` (objective values), when loaded.
    description : str
        Where the shards came from (the split's one-line description).
    dual : object or None
        The :class:`gossip.dual.params.DualParams` (the dashboard's simulator band).
    bound_c : float or None
        ``C`` of the rate line ``C exp(-theta t)`` on ``sum_v |x_v - x*|^2``.
    reason : str
        Why there is no ``x*`` (``""`` when there is one).
    """

    problem: str
    data: str
    split: str
    dim: int
    mu: float
    L: float
    eta: float
    c: float
    theta: float
    steps: tuple[float, ...]
    params: dict[str, Any]
    x_star: FloatArray | None
    value_star: float | None
    problems: Any = None
    description: str = ""
    dual: Any = None
    bound_c: float | None = None
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Return the task as a JSON-ready dict (no data: specs, parameters and ``x*``)."""
        return {
            "problem": self.problem,
            "data": self.data,
            "split": self.split,
            "dim": self.dim,
            "mu": self.mu,
            "L": self.L,
            "eta": self.eta,
            "c": self.c,
            "theta": self.theta,
            "params": dict(self.params),
            "x_star": None if self.x_star is None else [float(v) for v in self.x_star],
            "value_star": self.value_star,
            "description": self.description,
            "bound_c": self.bound_c,
            "no_check_reason": self.reason,
        }


def prepare_task(
    problem: str, data: str, split: str, topology: Topology, quantities: GraphQuantities
) -> OptTask:
    """Load the public data source and fix the run's dual parameters and ``x*`` (no network).

    Raises
    ------
    ConfigError
        An unknown problem, data source or split, or a data set that cannot be split into
        ``topology.n`` shards (the message names the value and what is valid).
    """
    if not problem:
        raise ConfigError("--problem is empty; e.g. logistic:0.01, ridge:0.1 or quadratic")
    from continuized.gossip.dual.network import build_network
    from continuized.gossip.dual.params import dual_params
    from continuized.gossip.dual.result import bound_constant

    # The same network the optimization simulator builds from these specs (the band), and the
    # nodes from theirs: so they get the split it used, not an empty one they cannot read.
    split = split or "iid:0"
    network = build_network(problem, data or None, split, topology.n)
    problems = network.problems
    dual = dual_params(
        "acd", quantities.mu_gossip, quantities.r_eff, mu=float(problems.mu), L=float(problems.L)
    )
    steps = tuple(float(s) for s in dual.steps)
    if len(steps) != topology.n_edges:
        raise GossipError(
            f"the dual parameters have {len(steps)} edge steps for {topology.n_edges} edges"
        )
    x_star = np.asarray(problems.x_star(), dtype=np.float64)
    return OptTask(
        problem=problem,
        data=data,
        split=split,
        dim=int(problems.dim),
        mu=float(problems.mu),
        L=float(problems.L),
        eta=float(dual.eta),
        c=float(dual.gamma_prime),
        theta=float(dual.theta),
        steps=steps,
        params=_plain(dual.as_dict()),
        x_star=x_star,
        value_star=float(problems.value(x_star)),
        problems=problems,
        dual=dual,
        description=network.description,
        bound_c=_finite(bound_constant(topology, problems, dual, x_star)),
    )


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) and value > 0 else None


def _plain(value: Any) -> Any:
    """Return ``value`` with numpy scalars and arrays turned into JSON-ready Python values."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass(frozen=True, slots=True)
class OptPoint:
    """The optimization figures of the network at one common time ``t``.

    Attributes
    ----------
    t : float
    distance : float
        ``sum_v |x_v - x*|^2`` (NaN without ``x*``).
    gap : float
        ``F(xbar) - F(x*)``, ``F = sum_v f_v``, ``xbar`` the nodes' average (NaN without ``x*``).
    consensus : float
        ``sum_v |x_v - xbar|^2``.
    dual_drift : float
        ``|sum_v y_v(t)| + |sum_v z_v(t)|`` (Euclidean norms; 0 in exact arithmetic).
    wall : float
        Unix time of the measurement.
    """

    t: float
    distance: float
    gap: float
    consensus: float
    dual_drift: float
    wall: float

    def as_list(self) -> list[float | None]:
        """Return ``[t, distance, gap, consensus, dual_drift, wall]`` (JSON-safe)."""
        return [
            _num(v)
            for v in (self.t, self.distance, self.gap, self.consensus, self.dual_drift, self.wall)
        ]


def _num(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


@dataclass(slots=True)
class OptTracker:
    """Turns the nodes' reports into :class:`OptPoint` figures and keeps their history."""

    task: OptTask
    history: list[OptPoint] = field(default_factory=list)
    final: OptPoint | None = None

    def measure(
        self,
        t: FloatArray,
        x: FloatArray,
        y: FloatArray,
        z: FloatArray,
        at: float,
        wall: float,
        primal_at: bool = False,
    ) -> OptPoint:
        """Measure the network from one report per node.

        ``x`` (the primal) is used as reported: it is a nonlinear function of ``y`` and cannot
        be mixed in closed form. ``(y, z)`` are mixed from each report's time ``t_v`` to the
        common time ``at`` (exact: the dual pair mixes like ARG's), so the dual sums are those
        of one instant. ``primal_at`` recomputes ``x_v = grad f_v^*(y_v(at))`` with the
        coordinator's own copy of the problems (when it has one): after the stop the nodes
        only mix, so their final ``x`` has drifted from the one at the stop.
        """
        with np.errstate(over="ignore", invalid="ignore"):
            ys, zs = mix(y, z, self.task.eta, (at - np.asarray(t, dtype=np.float64))[:, None])
            drift = float(np.linalg.norm(ys.sum(axis=0)) + np.linalg.norm(zs.sum(axis=0)))
            if primal_at and self.task.problems is not None:
                nodes = np.arange(len(ys), dtype=np.intp)
                x = np.asarray(self.task.problems.grad_conjugate(nodes, ys), dtype=np.float64)
            xbar = x.mean(axis=0)
            consensus = float(np.sum((x - xbar) ** 2))
            distance = gap = math.nan
            if self.task.x_star is not None:
                distance = float(np.sum((x - self.task.x_star) ** 2))
                if self.task.problems is not None and self.task.value_star is not None:
                    gap = float(self.task.problems.value(xbar)) - self.task.value_star
        return OptPoint(float(at), distance, gap, consensus, drift, wall)

    def error(self, point: OptPoint) -> float:
        """The run's error (what ``--until`` applies to): the distance, else the consensus."""
        return point.distance if self.task.x_star is not None else point.consensus

    def as_dict(self, history_limit: int | None = None) -> dict[str, Any]:
        """Return the task, the history (``[t, distance, gap, consensus, dual_drift, wall]``
        rows) and the final point, JSON-ready."""
        rows = self.history if history_limit is None else self.history[-history_limit:]
        return {
            **self.task.as_dict(),
            "history": [p.as_list() for p in rows],
            "final": None if self.final is None else self.final.as_list(),
        }

    def summary(self) -> dict[str, Any]:
        """Return the final (else latest) figures for the run summary and ``--json``."""
        point = self.final or (self.history[-1] if self.history else None)
        figures: dict[str, Any] = {
            "problem": self.task.problem,
            "data": self.task.data,
            "split": self.task.split,
            "description": self.task.description,
            "dim": self.task.dim,
            "x_star": self.task.as_dict()["x_star"],
            "no_check_reason": self.task.reason,
            "theta": self.task.theta,
        }
        for key in ("distance", "gap", "consensus", "dual_drift"):
            figures[key] = None if point is None else _num(getattr(point, key))
        return figures
