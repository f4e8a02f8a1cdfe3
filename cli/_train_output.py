"""Writers of ``gossip train`` and ``gossip reproduce training-figure``: figure, CSV, JSON summary.

The simulation (:mod:`gossip.train`) only returns curves; this edge module turns them into
files. matplotlib is imported inside the plotting function so ``gossip --help`` stays fast.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from continuized.gossip.train import TrainingResult

__all__ = [
    "COLORS",
    "TITLES",
    "plot_training",
    "t_to_accuracy",
    "t_to_consensus",
    "training_summary",
    "write_training_csv",
]

COLORS = {"a2cid2": "tab:red", "adpsgd": "tab:blue", "local": "tab:gray", "allreduce": "black"}
LABELS = {
    "a2cid2": "A²CiD² (continuized momentum)",
    "adpsgd": "AD-PSGD (pairwise averaging)",
    "local": "local SGD (no communication)",
    "allreduce": "all-reduce (ceiling)",
}
TITLES = {
    "loss": "training loss of the average model",
    "accuracy": "test accuracy of the average model",
    "node_accuracy": "mean test accuracy of the nodes",
    "consensus": r"consensus distance $\frac{1}{n}\sum_v |x_v - \bar x|^2$",
}
_LOG_METRICS = ("loss", "consensus")


def t_to_accuracy(result: TrainingResult, target: float) -> dict[str, Any]:
    """The t at which the average model first reaches ``target`` test accuracy, over the runs.

    ``median`` counts a run that never gets there as infinitely late (None if half never do);
    ``runs`` lists each run's time (None: never within the horizon).
    """
    return {"target": target, **_first_times(result.first_time("accuracy", target, above=True))}


def t_to_consensus(result: TrainingResult, eps: float) -> dict[str, Any]:
    """The t from which the consensus distance ``(1/n) sum_v |x_v - xbar|^2`` stays at or
    below ``eps`` to the horizon, over the runs, as :func:`t_to_accuracy` gives it (None: above
    ``eps`` at the horizon; a common start, at 0 and rising, is not counted at t = 0)."""
    return {"eps": eps, **_first_times(result.settled_time("consensus", eps))}


def _first_times(times: list[float | None]) -> dict[str, Any]:
    late = np.array([math.inf if t is None else t for t in times])
    median = float(np.median(late))
    return {
        "median": median if math.isfinite(median) else None,
        # No interpolation: between a finite time and "never" there is no time to report.
        "q05": _finite_or_none(float(np.quantile(late, 0.05, method="inverted_cdf"))),
        "q95": _finite_or_none(float(np.quantile(late, 0.95, method="inverted_cdf"))),
        "runs": times,
    }


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def training_summary(
    results: Mapping[str, TrainingResult],
    target: float,
    consensus_eps: float | None = None,
    **context: Any,
) -> dict[str, Any]:
    """The JSON summary: ``context`` (the run's settings), then per algorithm its final figures,
    its diverged runs, its time to ``target`` accuracy and (with ``consensus_eps``) its time
    to that consensus distance; ``diverged`` says whether any run of any algorithm diverged."""
    algorithms = {}
    for name, r in results.items():
        entry = r.summary()
        entry["t_to_accuracy"] = t_to_accuracy(r, target)
        if consensus_eps is not None:
            entry["t_to_consensus"] = t_to_consensus(r, consensus_eps)
        algorithms[name] = entry
    diverged = any(a["diverged_runs"] for a in algorithms.values())
    return {**context, "diverged": diverged, "algorithms": algorithms}


def write_training_csv(path: Path, results: Mapping[str, TrainingResult]) -> None:
    """Write ``t`` then, per algorithm and metric, the q05, median and q95 over runs."""
    from continuized.gossip.train import METRICS

    first = next(iter(results.values()))
    columns: list[tuple[str, Any]] = [("t", first.t_grid)]
    for name, r in results.items():
        for metric in METRICS:
            low, high = r.band(metric)
            columns += [
                (f"{name}_{metric}_q05", low),
                (f"{name}_{metric}_q50", r.median(metric)),
                (f"{name}_{metric}_q95", high),
            ]
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([c for c, _ in columns])
        for i in range(first.t_grid.size):
            writer.writerow([repr(float(values[i])) for _, values in columns])


def plot_training(
    path: Path,
    panels: Sequence[tuple[str, Mapping[str, TrainingResult]]],
    metrics: Sequence[str],
    *,
    title: str | None = None,
    columns: int = 3,
) -> None:
    """Draw the median over runs (line) and the 5-95% band (shaded) of every algorithm, against
    t (expected gradient steps per node).

    Several metrics: one row per panel, one column per metric. One metric: the panels on a
    grid of ``columns`` columns.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if len(metrics) > 1:
        cells = [(label, results, m) for label, results in panels for m in metrics]
        rows, cols = len(panels), len(metrics)
    else:
        cells = [(label, results, metrics[0]) for label, results in panels]
        cols = max(1, min(columns, len(panels)))
        rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.0 * rows + 0.6), squeeze=False)
    for ax in axes.flat[len(cells) :]:
        ax.set_visible(False)
    for (label, results, metric), ax in zip(cells, axes.flat, strict=False):
        _draw(ax, results, metric)
        ax.set_title(f"{label}: {TITLES[metric]}" if len(metrics) > 1 else label, fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.35 / (3.0 * rows + 0.6) + 0.03, 1, 0.97 if title else 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _draw(ax: Axes, results: Mapping[str, TrainingResult], metric: str) -> None:
    log = metric in _LOG_METRICS
    for name, r in results.items():
        median = r.median(metric)
        if np.isnan(median).all():
            continue  # unknown (a user model without predict): nothing to draw
        low, high = r.band(metric)
        if log:
            median, low, high = (np.where(v > 0, v, np.nan) for v in (median, low, high))
        color = COLORS.get(name)
        ax.fill_between(r.t_grid, low, high, color=color, alpha=0.18, lw=0)
        ax.plot(r.t_grid, median, color=color, lw=1.6, label=f"{LABELS.get(name, name)}")
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("t (expected gradient steps per node)")
    ax.set_ylabel(metric.replace("_", " "))
    ax.grid(True, alpha=0.3)
