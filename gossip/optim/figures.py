"""Draw the paper's optimization figures and write them, with their data, to a directory.

Files written into ``out_dir``:

* ``optim_comparison.png`` -- GD vs Nesterov vs continuized Nesterov, convex (left) and strongly
  convex (right); one run on top, the mean and 5% / 95% quantiles of ``runs`` runs below;
* ``optim_noise.png`` -- the same methods under additive Gaussian noise, started at ``x*``;
* ``optim_comparison_<panel>.csv`` and ``optim_noise_<panel>.csv`` -- every plotted curve;
* ``optim_figures.json`` -- settings, measured against theoretical convergence slopes, timings.

Drawing uses matplotlib's object API on the Agg canvas (no pyplot, no display needed).
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from continuized.gossip.errors import ConfigError
from continuized.gossip.optim._checks import check_count
from continuized.gossip.optim.experiments import METHODS, Panel, comparison_panels, noise_panels

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["optim_figure", "write_optim_figures"]

_LABELS = {
    "gradient_descent": "gradient descent",
    "nesterov": "Nesterov acceleration",
    "continuized_nesterov": "continuized Nesterov",
}
_COLORS = {
    "gradient_descent": "tab:blue",
    "nesterov": "tab:orange",
    "continuized_nesterov": "tab:green",
}
_TITLES = {"convex": "convex, d = 100", "strongly_convex": "strongly convex, d = 3"}
_SLOPE_DEFINITIONS = {
    "comparison.convex": (
        "exponent p of f(x_k) - f* ~ k^p, least squares on k in [n/10, n] (continuized: on the "
        "mean over the runs); theory: the guarantee's exponent, -1 for gradient descent, -2 for "
        "Nesterov and continuized Nesterov"
    ),
    "comparison.strongly_convex": (
        "rate r of ln(f(x_k) - f*) ~ r k on k in [n/10, n]; theory: the guarantee's rate, "
        "ln(1 - mu/L), ln(1 - sqrt(mu/L)) and -sqrt(mu/L) (per unit of t = E T_k). The "
        "guarantees bound f, a square of the error, so measured rates may be up to twice these"
    ),
    "noise.convex": (
        "exponent p of the mean f(x_k) - f* ~ k^p from x*, on [n/10, n]; final: the mean at "
        "k = n; bound: the continuized guarantee's noise term sigma^2 t / (3L) at t = n"
    ),
    "noise.strongly_convex": (
        "plateau: the mean f(x_k) - f* over the second half of the run; bound: the continuized "
        "guarantee's noise term sigma^2 / sqrt(mu L)"
    ),
}


def _draw(panels: list[Panel], path: Path, title: str, band_label: str) -> None:
    optim_figure(panels, title, band_label).savefig(path, dpi=110)


def optim_figure(panels: list[Panel], title: str, band_label: str) -> Figure:
    """One of the paper's optimization figures: a column per panel, one run over the mean.

    The constrained layout keeps every label and legend inside the figure's own canvas.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2)
    for col, panel in enumerate(panels):
        top, bottom = axes[0][col], axes[1][col]
        k = panel.k
        for method in METHODS:
            color = _COLORS[method]
            top.plot(k, panel.one_run[method], color=color, label=_LABELS[method])
            if method in panel.mean:
                bottom.plot(
                    k, panel.mean[method], color=color, lw=2, label=f"{_LABELS[method]}, mean"
                )
                bottom.plot(k, panel.q05[method], color=color, lw=0.7)
                bottom.plot(k, panel.q95[method], color=color, lw=0.7)
                bottom.fill_between(
                    k, panel.q05[method], panel.q95[method], color=color, alpha=0.12
                )
            else:
                bottom.plot(k, panel.one_run[method], color=color, label=_LABELS[method])
        for ax, what in ((top, "one run"), (bottom, f"{band_label} ({panel.runs} runs)")):
            ax.set_yscale("log")
            if panel.name == "convex":
                ax.set_xscale("log")
            ax.set_xlabel("k (gradient steps; t = E T_k for the continuized method)")
            ax.set_ylabel("f(x_k) - f*")
            ax.set_title(f"{_TITLES[panel.name]}: {what}", fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(title)
    return fig


def _write_csv(panel: Panel, path: Path) -> None:
    columns: list[tuple[str, Any]] = [("k", panel.k)]
    for method in METHODS:
        columns.append((f"{method}_one_run", panel.one_run[method]))
        if method in panel.mean:
            columns += [
                (f"{method}_mean", panel.mean[method]),
                (f"{method}_q05", panel.q05[method]),
                (f"{method}_q95", panel.q95[method]),
            ]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([name for name, _ in columns])
        for i in range(panel.k.size):
            writer.writerow([f"{values[i]:.17g}" for _, values in columns])


def write_optim_figures(
    out_dir: str | Path, runs: int = 1000, noise_runs: int = 100, seed: int = 0
) -> dict[str, Any]:
    """Compute both optimization figures and write PNGs, CSVs and a JSON summary to ``out_dir``.

    Parameters
    ----------
    out_dir : str or Path
        Directory, created if missing.
    runs : int
        Runs of the continuized method in the comparison figure (the paper uses 1000).
    noise_runs : int
        Runs of every method in the additive-noise figure (the paper uses 100).
    seed : int
        Seed of all the randomness (jump times, noise).

    Returns
    -------
    dict
        The JSON summary: settings, slopes per figure and panel, files written, seconds taken.
    """
    runs = check_count("runs", runs, 1)
    noise_runs = check_count("noise_runs", noise_runs, 1)
    seed = check_count("seed", seed, 0)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"out_dir (--out) must be a directory, but {str(out)!r} is a file")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create output directory {str(out)!r}: {exc.strerror}") from None
    started = time.perf_counter()
    figures = {
        "comparison": (comparison_panels(runs, seed), "mean, 5%/95% quantiles"),
        "noise": (noise_panels(noise_runs, seed), "mean, 5%/95% quantiles"),
    }
    computed = time.perf_counter() - started
    titles = {
        "comparison": "Gradient descent, Nesterov and continuized Nesterov (x0 = z0 = 0)",
        "noise": "Additive Gaussian noise, covariance 1e-4 I, started at the optimum",
    }
    files: list[str] = []
    summary: dict[str, Any] = {
        "settings": {"runs": runs, "noise_runs": noise_runs, "seed": seed, "noise_variance": 1e-4},
        "slopes": {},
        "slope_definitions": _SLOPE_DEFINITIONS,
    }
    for name, (panels, band) in figures.items():
        png = out / f"optim_{name}.png"
        _draw(panels, png, titles[name], band)
        files.append(png.name)
        for panel in panels:
            csv_path = out / f"optim_{name}_{panel.name}.csv"
            _write_csv(panel, csv_path)
            files.append(csv_path.name)
        summary["slopes"][name] = {panel.name: panel.slopes for panel in panels}
        summary["settings"][f"{name}_steps"] = {p.name: int(p.k[-1]) for p in panels}
    summary["files"] = files
    summary["seconds"] = {"compute": computed, "total": time.perf_counter() - started}
    json_path = out / "optim_figures.json"
    summary["files"].append(json_path.name)
    json_path.write_text(json.dumps(summary, indent=2) + "\n")
    return summary
