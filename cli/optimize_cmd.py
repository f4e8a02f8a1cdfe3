"""``gossip optimize`` and ``gossip reproduce optimization-figure``: decentralized optimization."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from continuized.cli._app import app, reproduce_app
from continuized.cli._errors import reported_errors
from continuized.cli._progress import progress_bar
from continuized.cli._saving import Saving
from continuized.cli._tables import figures_table
from continuized.cli.options.batch_runs import (
    GridPoints,
    PanelRuns,
    Runs,
    Seed,
    check_count,
    check_positive,
    seed_option,
)
from continuized.cli.options.envvars import option
from continuized.cli.options.output import CsvOut, FigureDir, PlotOut, ShowProgress, SummaryOut
from continuized.cli.options.panels import OBJECTIVE, RUN

if TYPE_CHECKING:
    from continuized.gossip.dual.experiment import Experiment

__all__ = ["optimization_figure", "optimize_cmd"]


@app.command("optimize")
def optimize_cmd(
    graph: Annotated[
        str,
        option(
            "Topology: line:30, grid:10x10, complete:10, ...",
            "GRAPH",
            "--graph",
            rich_help_panel=RUN,
        ),
    ] = "line:30",
    problem: Annotated[
        str,
        option(
            "Each node's function: quadratic, ridge:LAMBDA, logistic:LAMBDA, module:callable.",
            "PROBLEM",
            "--problem",
            rich_help_panel=OBJECTIVE,
        ),
    ] = "ridge:1",
    data: Annotated[
        str | None,
        option(
            "Data set: breast-cancer, diabetes, svmlight:PATH, csv:DIR, csv:FILE, npz:PATH, "
            "synthetic:SEED[:ROWSxDIM] (none for quadratic).",
            "DATA",
            "--data",
            rich_help_panel=OBJECTIVE,
        ),
    ] = "breast-cancer",
    split: Annotated[
        str,
        option(
            "How rows go to nodes: iid:SEED, label:SEED, dirichlet:ALPHA:SEED or shards:K:SEED.",
            "SPLIT",
            "--split",
            rich_help_panel=OBJECTIVE,
        ),
    ] = "iid:0",
    algorithms: Annotated[
        list[str] | None,
        option(
            "acd, cd or dgd; repeat for several (default acd and cd).",
            "ALGORITHM",
            "--algorithm",
            rich_help_panel=RUN,
        ),
    ] = None,
    runs: Runs = 100,
    t_end: Annotated[
        float | None,
        option(
            "Last time of the grid, in t (expected activations); default 20 / theta_acd.",
            "T_END",
            "--t-end",
            rich_help_panel=RUN,
        ),
    ] = None,
    grid_points: GridPoints = 100,
    eps: Annotated[
        float,
        option(
            "Target for t_eps: first grid time with median sum_v |x_v - x*|^2 <= eps.",
            "EPS",
            "--eps",
            rich_help_panel=RUN,
        ),
    ] = 1e-8,
    seed: Annotated[int, seed_option("Seed of the runs (and of the DGD step search).")] = 0,
    workers: Annotated[
        int | None,
        option(
            "Threads of the compiled sweep (default: one per CPU for large jobs), worker "
            "processes for numpy's (user-defined problems, GOSSIP_SIM_ENGINE=numpy; "
            "default 1).",
            "WORKERS",
            "--workers",
            rich_help_panel=RUN,
        ),
    ] = None,
    estimate: Annotated[
        str,
        option(
            "acd's primal estimate: grad f^*(y) (y, the better one) or of z.",
            "ESTIMATE",
            "--estimate",
            rich_help_panel=RUN,
        ),
    ] = "y",
    plot: PlotOut = None,
    csv_path: CsvOut = None,
    json_path: SummaryOut = None,
    progress: ShowProgress = True,
) -> None:
    """Minimise sum_v f_v over a graph by gossip: dual accelerated CD (acd) against cd and dgd."""
    from continuized.gossip.datasets.sources import require_source
    from continuized.gossip.errors import require_extra

    with reported_errors():  # before the imports below, which need SciPy
        require_extra("sim", ["scipy"], "gossip optimize")
        if data is not None and problem.strip().lower() != "quadratic":
            require_source(data)
        if plot is not None:
            require_extra("plot", ["matplotlib"], "--plot")
    import numpy as np
    from rich.console import Console

    from continuized.gossip.dual.experiment import (
        algorithm_params,
        parse_algorithms,
        run_experiment,
    )
    from continuized.gossip.dual.network import build_network
    from continuized.gossip.dual.report import plot_optimization, write_curves
    from continuized.gossip.errors import ConfigError
    from continuized.gossip.files.destinations import check_file_destination
    from continuized.gossip.files.outputs import FIGURE_SUFFIXES, write_json
    from continuized.gossip.graph.spectral import graph_quantities
    from continuized.gossip.graph.topology import parse_topology

    started = time.perf_counter()
    console = Console()
    with reported_errors():
        names = parse_algorithms(algorithms or ["acd", "cd"])
        check_count("--runs", runs, 1)
        check_count("--grid-points", grid_points, 2)
        check_count("--seed", seed, 0)
        if workers is not None:
            check_count("--workers", workers, 1)
        if t_end is not None:
            check_positive("--t-end", t_end)
        check_positive("--eps", eps)
        if estimate not in ("y", "z"):
            raise ConfigError(f"--estimate must be y or z, got {estimate!r}")
        if plot is not None:
            check_file_destination("--plot", plot, FIGURE_SUFFIXES)
        if csv_path is not None:
            check_file_destination("--csv", csv_path)
        if json_path is not None:
            check_file_destination("--json", json_path)
        topo = parse_topology(graph)
        q = graph_quantities(topo)
        network = build_network(problem, data, split, topo.n)
        console.print(network.description, highlight=False)
        end = t_end
        if end is None:
            end = float(math.ceil(20.0 / algorithm_params("acd", q, network.problems).theta))
        grid = np.linspace(0.0, end, grid_points)

        def describe(name: str) -> str:
            return f"{name}: {runs} runs to t={end:g}"

        compiling = _compiling(names, network.problems) if progress else None
        with progress_bar(progress, describe, compiling) as report:
            exp = run_experiment(
                topo,
                network.problems,
                names,
                grid,
                runs,
                seed,
                workers=workers,
                estimate=estimate,
                progress=report,
                quantities=q,
            )
        summary = exp.summary(
            eps,
            problem=problem,
            data=data,
            split=split,
            split_description=network.description,
            runs=runs,
            seed=seed,
            wall_seconds=time.perf_counter() - started,
        )
    label = f"{graph}, {problem}, {data or 'no data'}"
    saving = Saving("optimize")
    saving.write("--plot", plot, lambda p: plot_optimization(p, [(label, exp.results)], columns=1))
    saving.write("--csv", csv_path, lambda p: write_curves(p, exp.results))
    saving.write("--json", json_path, lambda p: write_json(p, summary))
    _print_experiment(console, exp, summary)
    for path in saving.written:
        console.print(f"wrote {path}", highlight=False)
    saving.finish(summary)


@reproduce_app.command("optimization-figure")
def optimization_figure(
    out: FigureDir = Path("figures"),
    runs: PanelRuns = 10,
    seed: Seed = 0,
    workers: Annotated[
        int,
        option(
            "Worker processes, one panel each (default 2).",
            "WORKERS",
            "--workers",
            rich_help_panel=RUN,
        ),
    ] = 2,
    t_scale: Annotated[
        float,
        option(
            "Multiply every panel's horizon by this (1: as documented).",
            "T_SCALE",
            "--t-scale",
            rich_help_panel=RUN,
        ),
    ] = 1.0,
    progress: ShowProgress = True,
) -> None:
    """Decentralized optimization: breast-cancer ridge and logistic on line:30 and grid:10x10,
    and the DADAO synthetic setting on six 10-node graphs; acd against cd and dgd."""
    from continuized.gossip.errors import require_extra

    with reported_errors():
        require_extra("sim", ["scipy"], "gossip reproduce optimization-figure")
        require_extra("data", ["sklearn"], "gossip reproduce optimization-figure")
        require_extra("plot", ["matplotlib"], "gossip reproduce optimization-figure")
    from rich.console import Console

    from continuized.gossip.dual.figure import write_optimization_figures
    from continuized.gossip.files.destinations import check_dir_destination

    started = time.perf_counter()
    with reported_errors():
        check_count("--runs", runs, 1)
        check_count("--seed", seed, 0)
        check_count("--workers", workers, 1)
        check_dir_destination("--out", out)
        with progress_bar(progress, compiling=_compiling() if progress else None) as report:
            summary = write_optimization_figures(
                out,
                runs=runs,
                seed=seed,
                workers=workers,
                t_scale=t_scale,
                progress=lambda done, total: report("panels", done, total),
            )
    console = Console()
    table = figures_table(
        "t where the median error reaches eps, per panel (a: breast-cancer, b: DADAO)",
        ["panel", "eps", "acd", "cd", "dgd", "cd/acd", "theory"],
    )
    for setting, panel, eps, *hits, ratio, theory in summary["table"]:
        table.add_row(
            f"{setting} {panel}",
            f"{eps:.2g}",
            *["-" if t is None else f"{t:.0f}" for t in hits],
            _cell(ratio, ".2f"),
            _cell(theory, ".3g"),
        )
    console.print(table)
    console.print(
        f"wrote {', '.join(summary['files'])} to {out}/ in {time.perf_counter() - started:.1f} s",
        highlight=False,
    )


def _compiling(algorithms: Sequence[str] | None = None, problems: Any = None) -> str | None:
    """What the first sweep compiles, if numba's cache is cold for the compiled sweep and it runs
    here: for every algorithm and problem set (the figure's built-in ones) or, given, for one
    of ``algorithms`` on ``problems``; else None."""
    from continuized.gossip.dual.compiled import compiled_form, dual_kernel_compiles
    from continuized.gossip.dual.params import DualAlgorithm

    if not dual_kernel_compiles():
        return None
    if algorithms is not None and all(
        compiled_form(DualAlgorithm(name), problems) is None for name in algorithms
    ):
        return None  # a user-defined problem set: the numpy engine sweeps it
    return "the optimization sweep's kernel"


def _t(value: float) -> str:
    """A time t, whole from 100 on (a grid point: ``18466``, never ``1.84662e+06``)."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _cell(value: Any, fmt: str = ".4g") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, fmt)
    return str(value)


def _print_experiment(console: Any, exp: Experiment, summary: dict[str, Any]) -> None:
    for params in exp.params.values():
        console.print(params.describe(), highlight=False)
    q = summary["quantities"]
    runs = sorted({a["runs"] for a in summary["algorithms"].values()})
    # Six narrow columns fit 80 columns whole: theta is on each algorithm's line above, the run
    # count goes to the title.
    table = figures_table(
        f"{summary['graph']}: n={q['n']}, |E|={q['n_edges']}, "
        f"mu_gossip={q['mu_gossip']:.4g}, R_max={q['r_max']:.4g}; eps={summary['eps']:g}; "
        f"error = sum_v |x_v - x*|^2; {'/'.join(map(str, runs))} runs each",
        ["algorithm", "t_eps", "final median", "final mean", "final gap", "consensus"],
    )
    for name, a in summary["algorithms"].items():
        table.add_row(
            name,
            "never" if a["t_eps"] is None else _t(a["t_eps"]),
            f"{a['final_median']:.3e}",
            f"{a['final_mean']:.3e}",
            f"{a['final_gap_mean']:.3e}",
            f"{a['final_consensus_mean']:.3e}",
        )
    console.print(table)
    if "speedup_t_eps" in summary:
        console.print(
            f"acd reaches eps {summary['speedup_t_eps']:.2f}x sooner than cd "
            f"(theory's factor theta_acd / theta_cd = {summary['theory_factor']:.3g})",
            highlight=False,
        )
