"""Writers for optimization runs: the PNG, a CSV of the curves, the JSON summary's parts.

An edge module: it writes files. matplotlib is imported lazily with the Agg backend.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.dual.result import OptimizationResult, t_eps
from continuized.gossip.errors import ConfigError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "COLORS",
    "LABELS",
    "algorithm_summary",
    "optimization_figure",
    "plot_optimization",
    "write_curves",
]

COLORS = {"acd": "tab:red", "cd": "tab:blue", "dgd": "tab:green"}
"""One colour per algorithm, the same in every figure."""

LABELS = {
    "acd": "accelerated dual CD (acd)",
    "cd": "dual CD (cd)",
    "dgd": "gossip + gradient (dgd)",
}

FloatArray = NDArray[np.float64]


def algorithm_summary(result: OptimizationResult, eps: float) -> dict[str, Any]:
    """Return the JSON-ready summary of one algorithm's runs.

    Keys: ``t_eps`` (first grid t with median ``sum_v |x_v - x*|^2 <= eps``, or None), the final
    median and mean of the error, of the objective gap and of the consensus distance, the
    initial error, ``bound_factor`` (the C of ``C exp(-theta t)``), ``runs``, ``seed``,
    ``estimate``, ``engine`` and every parameter.
    """

    def last(values: FloatArray) -> float:
        return float(values[:, -1].mean())

    return {
        "t_eps": t_eps(result, eps),
        "final_median": float(result.median()[-1]),
        "final_mean": float(result.mean()[-1]),
        "final_gap_mean": last(result.gaps),
        "final_gap_median": float(np.median(result.gaps[:, -1])),
        "final_consensus_mean": last(result.consensus),
        "initial_error": float(result.errors[0, 0]),
        "bound_factor": result.bound_factor,
        "runs": result.runs,
        "seed": result.seed,
        "estimate": result.estimate,
        "engine": result.engine,
        "params": result.params.as_dict(),
    }


def write_curves(path: Path, results: Mapping[str, OptimizationResult]) -> None:
    """Write ``t`` then, per algorithm: error mean, q05, q50, q95, run0; gap and consensus means."""
    algos = list(results)
    if not algos:
        raise ConfigError("no results to write")
    grid = results[algos[0]].t_grid
    columns: list[tuple[str, FloatArray]] = [("t", grid)]
    for name in algos:
        r = results[name]
        columns += [
            (f"{name}_mean", r.mean()),
            (f"{name}_q05", r.quantile(0.05)),
            (f"{name}_q50", r.median()),
            (f"{name}_q95", r.quantile(0.95)),
            (f"{name}_run0", r.errors[0]),
            (f"{name}_gap_mean", r.gaps.mean(axis=0)),
            (f"{name}_consensus_mean", r.consensus.mean(axis=0)),
        ]
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([name for name, _ in columns])
        for i in range(grid.size):
            writer.writerow([repr(float(values[i])) for _, values in columns])


def plot_optimization(
    path: Path,
    panels: Sequence[tuple[str, Mapping[str, OptimizationResult]]],
    *,
    title: str | None = None,
    per_node: bool = False,
    columns: int = 2,
) -> None:
    """Draw one axis per panel: per algorithm one run (thin), the mean (thick) with its 5-95%
    band, and the theorem's bound ``C exp(-theta t)`` (dashed).

    The y axis is ``sum_v |x_v(t) - x*|^2`` on a log scale (divided by n with ``per_node``, the
    DADAO paper's metric), against t (expected activations). See :func:`optimization_figure`.
    """
    fig = optimization_figure(panels, title=title, per_node=per_node, columns=columns)
    fig.savefig(path, dpi=110)


def optimization_figure(
    panels: Sequence[tuple[str, Mapping[str, OptimizationResult]]],
    *,
    title: str | None = None,
    per_node: bool = False,
    columns: int = 2,
) -> Figure:
    """The figure :func:`plot_optimization` saves, every label inside its own canvas.

    The shared legend goes below the axes, in as many columns (at most 4) as fit the figure's
    width, and the constrained layout reserves its room.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cols = max(1, min(columns, len(panels)))
    rows = -(-len(panels) // cols)
    fig = Figure(figsize=(5.2 * cols, 3.6 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for (label, results), ax in zip(panels, axes.flat, strict=False):
        _draw_panel(ax, results, per_node)
        ax.set_title(label, fontsize=10)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    _fitted_legend(fig, handles, labels)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def _fitted_legend(fig: Figure, handles: list[Any], labels: list[str]) -> None:
    """A legend below the axes with the most columns (up to 4) that fit the figure's width."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    # Balanced rows: five entries go 3 + 2, not 4 + 1.
    widest = -(-len(labels) // -(-len(labels) // 4)) if labels else 1
    for ncol in range(widest, 0, -1):
        legend = fig.legend(
            handles, labels, loc="outside lower center", ncol=ncol, fontsize=9, frameon=False
        )
        if legend.get_window_extent(renderer).width <= 0.98 * fig.bbox.width or ncol == 1:
            return
        legend.remove()


def _draw_panel(ax: Axes, results: Mapping[str, OptimizationResult], per_node: bool) -> None:
    scale = 1.0
    floor = np.inf
    top = 0.0
    for name, r in results.items():
        scale = 1.0 / r.n if per_node else 1.0
        color = COLORS.get(name)
        low, high = _positive(r.quantile(0.05) * scale), _positive(r.quantile(0.95) * scale)
        ax.fill_between(r.t_grid, low, high, color=color, alpha=0.18, lw=0)
        ax.plot(r.t_grid, _positive(r.errors[0] * scale), color=color, lw=0.6, alpha=0.8)
        ax.plot(r.t_grid, _positive(r.mean() * scale), color=color, lw=2.0, label=LABELS[name])
        if np.isfinite(r.bound_factor):
            top = max(top, r.bound_factor * scale)
            ax.plot(
                r.t_grid,
                r.bound() * scale,
                color=color,
                lw=1.0,
                ls="--",
                label=f"theorem's bound, {name}",
            )
        positive = r.quantile(0.05)[r.quantile(0.05) > 0] * scale
        if positive.size:
            floor = min(floor, float(positive.min()))
        top = max(top, float(np.nanmax(high)))
    ax.set_yscale("log")
    if np.isfinite(floor) and top > 0:
        ax.set_ylim(max(floor / 3.0, top * 1e-18), top * 3.0)
    ax.set_xlabel("t (expected activations)")
    ax.set_ylabel(r"$\frac{1}{n}\sum_v |x_v - x^*|^2$" if per_node else r"$\sum_v |x_v - x^*|^2$")
    ax.grid(True, which="major", alpha=0.3)


def _positive(values: FloatArray) -> FloatArray:
    """Mask values <= 0 so the log scale skips them."""
    return np.where(values > 0, values, np.nan)
