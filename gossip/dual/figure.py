"""``gossip reproduce optimization-figure``: accelerated dual gossip against its baselines.

Two settings, every panel with the same activations for every algorithm (same seed):

(a) breast-cancer (scikit-learn's bundled copy, features standardised), split iid over the
    nodes; ridge and L2-logistic regression (lambda = 1) on ``line:30`` and ``grid:10x10``;
    metric ``sum_v |x_v - x*|^2``.
(b) the DADAO paper's synthetic setting (Nabli and Oyallon, 2022): 10 workers, linear regression
    on 1,000 synthetic samples in dimension 2 with a random slope U(0.01, 5) per worker and
    noise 10, and L2-logistic regression with mu = 1; graphs star, complete, cycle, path, 2D grid
    (2x5) and barbell (two 5-cliques joined by an edge); metric ``(1/n) sum_v |x_v - x*|^2``.

Panels are simulated in worker processes (one panel per task). The horizons are chosen so that
the whole figure takes about 13 s on two cores with the default 10 runs per algorithm and the
compiled sweep (about 30 s with ``GOSSIP_SIM_ENGINE=numpy``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from continuized.gossip.dual.experiment import Experiment, run_experiment
from continuized.gossip.dual.network import build_network, dadao_network
from continuized.gossip.dual.report import plot_optimization, write_curves
from continuized.gossip.dual.result import t_eps
from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.topology import Topology, parse_topology, topology_from_graph

__all__ = ["PANELS", "Panel", "run_panel", "write_optimization_figures"]

ALGORITHMS = ("acd", "cd", "dgd")


@dataclass(frozen=True)
class Panel:
    """One panel: a graph, a problem, its data and a horizon (t)."""

    setting: str
    graph: str
    problem: str
    data: str
    t_end: float
    rel_eps: float

    @property
    def title(self) -> str:
        """The panel's title in the figure."""
        data = "DADAO synthetic" if self.data == "dadao" else self.data
        return f"{self.problem}, {data}, {self.graph}"

    @property
    def stem(self) -> str:
        """File name stem of the panel's CSV."""
        text = f"opt-{self.setting}-{self.problem}-{self.graph}"
        return text.replace(":", "").replace(".", "p")


_DADAO_GRAPHS = (
    ("star:10", 400.0),
    ("complete:10", 150.0),
    ("cycle:10", 800.0),
    ("line:10", 1500.0),
    ("grid:2x5", 800.0),
    ("barbell:5", 2000.0),
)

# Logistic regression costs a (warm-started) Newton solve per activation, ridge one
# matrix-vector product: the DADAO logistic horizons are a little shorter. On breast-cancer
# the logistic panels run as long as the ridge ones: acd overtakes cd only after about
# 1 / theta_acd (1,200 on line:30, 3,000 on grid:10x10), which the compiled sweep reaches in
# seconds (gossip.dual.compiled; with the numpy sweep they stopped at 1,500).
_LOGISTIC_SHARE = 0.75

PANELS: tuple[Panel, ...] = (
    Panel("a", "line:30", "ridge:1", "breast-cancer", 16_000.0, 1e-8),
    Panel("a", "grid:10x10", "ridge:1", "breast-cancer", 16_000.0, 1e-8),
    Panel("a", "line:30", "logistic:1", "breast-cancer", 16_000.0, 1e-8),
    Panel("a", "grid:10x10", "logistic:1", "breast-cancer", 16_000.0, 1e-8),
    *(Panel("b", graph, "ridge:0", "dadao", t_end, 1e-8) for graph, t_end in _DADAO_GRAPHS),
    *(
        Panel("b", graph, "logistic:1", "dadao", t_end * _LOGISTIC_SHARE, 1e-8)
        for graph, t_end in _DADAO_GRAPHS
    ),
)
"""The panels of both settings; ``rel_eps`` sets the table's target as a share of e0."""


def panel_topology(spec: str) -> Topology:
    """Return the topology of a panel; ``barbell:K`` is two K-cliques joined by one edge."""
    if spec.startswith("barbell:"):
        import networkx as nx

        k = int(spec.partition(":")[2])
        return topology_from_graph(nx.barbell_graph(k, 0), spec=spec)
    return parse_topology(spec)


def run_panel(
    panel: Panel, runs: int, seed: int, t_scale: float = 1.0, points: int = 80
) -> Experiment:
    """Simulate every algorithm of one panel to ``t_scale`` times its horizon."""
    topo = panel_topology(panel.graph)
    if panel.data == "dadao":
        network = dadao_network(panel.problem, seed)
    else:
        network = build_network(panel.problem, panel.data, f"iid:{seed}", topo.n)
    grid = np.linspace(0.0, panel.t_end * t_scale, points)
    return run_experiment(topo, network.problems, ALGORITHMS, grid, runs, seed)


def write_optimization_figures(
    out: Path,
    runs: int = 10,
    seed: int = 0,
    workers: int = 2,
    progress: Callable[[float, float], None] | None = None,
    t_scale: float = 1.0,
) -> dict[str, Any]:
    """Simulate every panel, write the two PNGs, one CSV per panel and a JSON summary.

    ``t_scale`` multiplies every panel's horizon (1: the figure as documented).

    Returns the summary (also written to ``optimization-figure.json``): per panel the
    parameters and figures of every algorithm, and a table of times to the target.
    """
    if not (np.isfinite(t_scale) and t_scale > 0):
        raise ConfigError(f"the horizon scale must be a finite number > 0, got {t_scale!r}")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the output directory {str(out)!r}: {exc}") from None
    started = time.perf_counter()
    experiments = _run_all(runs, seed, workers, t_scale, progress)
    files: list[str] = []
    summary: dict[str, Any] = {
        "runs": runs,
        "seed": seed,
        "t_scale": t_scale,
        "panels": {},
        "table": [],
    }
    for panel, exp in zip(PANELS, experiments, strict=True):
        eps = panel.rel_eps * float(np.median(exp.results["acd"].errors[:, 0]))
        write_curves(out / f"{panel.stem}.csv", exp.results)
        files.append(f"{panel.stem}.csv")
        summary["panels"][panel.stem] = exp.summary(
            eps, setting=panel.setting, problem=panel.problem, data=panel.data
        )
        hits = {name: t_eps(r, eps) for name, r in exp.results.items()}
        ratio = hits["cd"] / hits["acd"] if hits["cd"] and hits["acd"] else None
        theory = exp.params["acd"].theta / exp.params["cd"].theta
        summary["table"].append(
            [panel.setting, f"{panel.problem} {panel.graph}", eps, *hits.values(), ratio, theory]
        )
    for setting, name, title, per_node, columns in (
        ("a", "optimization-breast-cancer.png", "breast-cancer (iid split)", False, 2),
        ("b", "optimization-dadao.png", "DADAO synthetic setting, 10 workers", True, 4),
    ):
        panels = [
            (p.title, e.results)
            for p, e in zip(PANELS, experiments, strict=True)
            if p.setting == setting
        ]
        plot_optimization(
            out / name,
            panels,
            title=f"{title}: one run (thin), mean and 5-95% band of {runs} runs, bound (dashed)",
            per_node=per_node,
            columns=columns,
        )
        files.append(name)
    summary["seconds"] = time.perf_counter() - started
    summary["files"] = [*files, "optimization-figure.json"]
    (out / "optimization-figure.json").write_text(json.dumps(summary, indent=2, default=_json))
    return summary


def _json(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {value!r}")


def _panel_task(index: int, runs: int, seed: int, t_scale: float) -> Experiment:
    return run_panel(PANELS[index], runs, seed, t_scale)


def _run_all(
    runs: int,
    seed: int,
    workers: int,
    t_scale: float,
    progress: Callable[[float, float], None] | None,
) -> list[Experiment]:
    total = float(len(PANELS))
    if workers <= 1:
        done: list[Experiment] = []
        for i in range(len(PANELS)):
            done.append(_panel_task(i, runs, seed, t_scale))
            if progress is not None:
                progress(float(len(done)), total)
        return done
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        # The longest panels first, so that the two workers finish together.
        order = sorted(range(len(PANELS)), key=lambda i: -PANELS[i].t_end)
        futures: dict[int, Future[Experiment]] = {
            i: pool.submit(_panel_task, i, runs, seed, t_scale) for i in order
        }
        pending = set(futures.values())
        while pending:
            _, pending = wait(pending, return_when=FIRST_COMPLETED)
            if progress is not None:
                progress(total - len(pending), total)
        return [futures[i].result() for i in range(len(PANELS))]
