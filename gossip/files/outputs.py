"""Writers for simulation results: the paper-style PNG, a CSV of the curves, a JSON summary.

This is an edge module: it writes files. matplotlib is imported lazily, with the Agg backend, so
that importing the package (or running ``gossip --help``) stays fast and needs no display.
"""

from __future__ import annotations

import csv
import json
import math
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError
from continuized.gossip.sim.simulator import SimulationResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "COLORS",
    "FIGURE_SUFFIXES",
    "algorithm_summary",
    "gossip_figure",
    "plot_gossip_figure",
    "prepare_plotting",
    "t_eps",
    "write_csv",
    "write_json",
]

COLORS = {"rg": "tab:blue", "arg": "tab:red"}
"""One colour per algorithm, the same in every figure."""

FIGURE_SUFFIXES = (".png", ".pdf", ".svg")

LABELS = {"rg": "randomized gossip (RG)", "arg": "accelerated gossip (ARG)"}


def t_eps(result: SimulationResult, eps: float) -> float | None:
    """Return the first grid time at which the median error is ``<= eps``, or None if never."""
    hits = np.flatnonzero(result.median() <= eps)
    return float(result.t_grid[hits[0]]) if hits.size else None


def algorithm_summary(result: SimulationResult, eps: float) -> dict[str, Any]:
    """Return the JSON-ready summary of one algorithm's runs.

    Keys: ``t_eps`` (first grid t with median error <= eps, or None), ``final_median``,
    ``final_mean``, ``initial_error``, ``theta``, ``eta``, ``c``, ``bound_factor``, ``runs``,
    ``seed``.
    """
    p = result.params
    return {
        "t_eps": t_eps(result, eps),
        "final_median": float(result.median()[-1]) if result.t_grid.size else None,
        "final_mean": float(result.mean()[-1]) if result.t_grid.size else None,
        "initial_error": result.initial_error,
        "theta": p.theta,
        "eta": p.eta,
        "c": p.c,
        "bound_factor": p.bound_factor,
        "runs": result.runs,
        "seed": result.seed,
    }


def write_csv(path: Path, results: Mapping[str, SimulationResult]) -> None:
    """Write the curves: ``t`` then, per algorithm, mean, q05, q50, q95 and the first run."""
    algos = list(results)
    if not algos:
        raise ConfigError("no results to write")
    grid = results[algos[0]].t_grid
    columns: list[tuple[str, NDArray[np.float64]]] = [("t", grid)]
    for name in algos:
        r = results[name]
        columns += [
            (f"{name}_mean", r.mean()),
            (f"{name}_q05", r.quantile(0.05)),
            (f"{name}_q50", r.median()),
            (f"{name}_q95", r.quantile(0.95)),
            (f"{name}_run0", r.errors[0]),
        ]
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([name for name, _ in columns])
        for i in range(grid.size):
            writer.writerow([repr(float(values[i])) for _, values in columns])


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as indented JSON (non-finite floats become null)."""
    path.write_text(json.dumps(_finite(data), indent=2) + "\n")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


_preparing: threading.Thread | None = None
_preparing_lock = threading.Lock()


def prepare_plotting() -> None:
    """Start importing matplotlib and loading its font in a background thread, and return.

    That is about half a second of CPU that a caller can overlap with a simulation (the
    compiled kernel releases the GIL); :func:`plot_gossip_figure` waits for it to finish.
    """
    global _preparing
    with _preparing_lock:
        if _preparing is None:
            # Not a daemon: an early exit waits for it rather than stopping it inside an import.
            _preparing = threading.Thread(target=_warm, name="gossip-plot-warm-up")
            _preparing.start()


def _warm() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1))
    FigureCanvasAgg(fig)
    fig.text(0.5, 0.5, "10\u2070")  # loads the default font
    fig.canvas.draw()


def plot_gossip_figure(
    path: Path,
    panels: Sequence[tuple[str, Mapping[str, SimulationResult]]],
    title: str | None = None,
) -> None:
    """Draw the paper's figure: one row per graph, one run on the left, mean and band on the right.

    Each axis has the error ``sum_v 1/2 (x_v(t) - mean)^2`` on a log scale against t. The right
    column shows, per algorithm, the mean over runs (thick), its 5% and 95% quantiles (shaded
    band, thin edges) and the theorem's bound ``factor * e0 * exp(-theta t)`` (dashed).
    See :func:`gossip_figure`.
    """
    gossip_figure(panels, title).savefig(path, dpi=110)


def gossip_figure(
    panels: Sequence[tuple[str, Mapping[str, SimulationResult]]], title: str | None = None
) -> Figure:
    """The figure :func:`plot_gossip_figure` saves; its legends sit inside their axes."""
    with _preparing_lock:
        preparing = _preparing
    if preparing is not None:
        preparing.join()  # never import matplotlib from two threads at once
    # Figure and the Agg canvas directly, not pyplot (a third of a second to import), and no
    # mathtext (its parser takes as long to build): the labels are plain Unicode.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    rows = len(panels)
    height = 3.4 * rows
    fig = Figure(figsize=(11, height))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 2, squeeze=False)
    power = FuncFormatter(_power_of_ten)
    for (label, results), (ax_run, ax_mean) in zip(panels, axes, strict=True):
        _draw_one_run(ax_run, results)
        _draw_mean(ax_mean, results)
        # 10 pt: the longest title ("Complete graph, 10 nodes: mean, 5-95% band (1000 runs)")
        # then fits the width of its axis.
        ax_run.set_title(f"{label}: one run", fontsize=10)
        ax_mean.set_title(f"{label}: mean, 5-95% band ({_runs(results)} runs)", fontsize=10)
        floor = _floor(results)
        for ax in (ax_run, ax_mean):
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(power)
            ax.set_xlabel("t (expected activations)")
            ax.set_ylabel("\u03a3\u1d65 \u00bd (x\u209c(v) \u2212 x\u0304)\u00b2")
            ax.set_ylim(bottom=floor)
            ax.grid(True, which="major", alpha=0.3)
        ax_mean.legend(fontsize=8, loc="lower left")
    # Fixed margins in inches (what tight_layout would find for these labels, without its
    # extra layout pass over every tick label).
    top = 0.55 if title else 0.35
    fig.subplots_adjust(
        left=0.85 / 11,
        right=1 - 0.3 / 11,
        bottom=0.55 / height,
        top=1 - top / height,
        wspace=0.25,
        hspace=0.95 / 3.4 * 1.45,
    )
    if title:
        fig.suptitle(title, y=1 - 0.12 / height, va="top")
    return fig


def _power_of_ten(value: float, _pos: int | None = None) -> str:
    """A log axis' major tick label without mathtext: 10 with a Unicode superscript exponent."""
    if value <= 0:
        return ""
    exponent = math.log10(value)
    if abs(exponent - round(exponent)) > 1e-9:
        return f"{value:.2g}"
    return "10" + str(round(exponent)).translate(_SUPERSCRIPT)


_SUPERSCRIPT = str.maketrans(
    "-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079"
)


def _runs(results: Mapping[str, SimulationResult]) -> int:
    return max(r.runs for r in results.values())


def _floor(results: Mapping[str, SimulationResult]) -> float:
    """A lower y limit: the smallest positive plotted value, but no deeper than 1e-16 * e0."""
    e0 = max(r.initial_error for r in results.values())
    lows = [
        float(np.min(r.quantile(0.05)[r.quantile(0.05) > 0], initial=e0)) for r in results.values()
    ]
    return max(min(lows), 1e-16 * e0) / 3.0


def _positive(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """Mask values <= 0 (a run that averaged exactly) so the log scale skips them."""
    return np.where(values > 0, values, np.nan)


def _draw_one_run(ax: Axes, results: Mapping[str, SimulationResult]) -> None:
    # Earlier curves are drawn wider, so identical curves (complete graph) stay both visible.
    for i, (name, r) in enumerate(results.items()):
        ax.plot(
            r.t_grid,
            _positive(r.errors[0]),
            color=COLORS.get(name),
            lw=0.8 + 1.0 * (len(results) - 1 - i),
            label=LABELS.get(name, name),
        )
    ax.legend(fontsize=8, loc="lower left")


def _draw_mean(ax: Axes, results: Mapping[str, SimulationResult]) -> None:
    for i, (name, r) in enumerate(results.items()):
        color = COLORS.get(name)
        low, high = _positive(r.quantile(0.05)), _positive(r.quantile(0.95))
        ax.fill_between(r.t_grid, low, high, color=color, alpha=0.2, lw=0)
        ax.plot(r.t_grid, low, color=color, lw=0.5)
        ax.plot(r.t_grid, high, color=color, lw=0.5)
        ax.plot(
            r.t_grid,
            _positive(r.mean()),
            color=color,
            lw=2.0 + 1.5 * (len(results) - 1 - i),  # wider first, as in _draw_one_run
            label=f"mean, {LABELS.get(name, name)}",
        )
        ax.plot(
            r.t_grid,
            r.bound(),
            color=color,
            lw=1.0,
            ls="--",
            label=f"bound {r.params.bound_factor:g} e\u2080 exp(\u2212\u03b8t), "
            f"\u03b8={r.params.theta:.3g}",
        )
