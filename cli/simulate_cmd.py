"""``gossip simulate`` and ``gossip reproduce gossip-figure``: Monte Carlo runs of RG and ARG."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from continuized.cli._app import app, reproduce_app
from continuized.cli._errors import plain_console, reported_errors, warn
from continuized.cli._progress import progress_bar
from continuized.cli._saving import Saving
from continuized.cli._tables import figures_table
from continuized.cli.options.batch_runs import (
    Eps,
    GridPoints,
    PanelGridPoints,
    PanelRuns,
    Runs,
    Seed,
    Workers,
    check_count,
    check_positive,
    seed_option,
)
from continuized.cli.options.envvars import option
from continuized.cli.options.objective import Dim, Values
from continuized.cli.options.output import CsvOut, FigureDir, PlotOut, ShowProgress, SummaryOut
from continuized.cli.options.panels import RUN

if TYPE_CHECKING:
    from continuized.gossip.graph.spectral import GraphQuantities
    from continuized.gossip.graph.topology import Topology
    from continuized.gossip.sim.simulator import SimulationResult

__all__ = ["PAPER_GRAPHS", "gossip_figure", "simulate_cmd"]

PAPER_GRAPHS: tuple[tuple[str, str, float], ...] = (
    ("line:30", "Line graph, 30 nodes", 15_000.0),
    ("grid:15x15", "2D grid, 225 nodes", 40_000.0),
    ("complete:10", "Complete graph, 10 nodes", 250.0),
)
"""The paper's gossip figure (the paper's experiments): spec, title, t range chosen to show the
curves."""


@app.command("simulate")
def simulate_cmd(
    graph: Annotated[
        str,
        option(
            "Topology spec: line:30, grid:15x15, complete:10, er:N:p:seed, file:PATH ...",
            "GRAPH",
            "--graph",
            rich_help_panel=RUN,
        ),
    ] = "line:30",
    algorithms: Annotated[
        list[str] | None,
        option(
            "Algorithm to run: rg or arg; repeat for both (default both).",
            "ALGORITHM",
            "--algorithm",
            "-a",
            rich_help_panel=RUN,
        ),
    ] = None,
    runs: Runs = 1000,
    t_end: Annotated[
        float | None,
        option(
            "Last time of the grid, in t (expected activations); default 20 / theta_ARG.",
            "T_END",
            "--t-end",
            rich_help_panel=RUN,
        ),
    ] = None,
    grid_points: GridPoints = 200,
    eps: Eps = 1e-6,
    values: Values = "onehot",
    dim: Dim = 1,
    seed: Annotated[int, seed_option("Seed; run r uses SeedSequence(seed) child r.")] = 0,
    workers: Workers = None,
    weighted: Annotated[
        bool,
        option(
            "Edge probabilities proportional to edge weights (file:...).",
            "WEIGHTED",
            "--weighted/--uniform",
            rich_help_panel=RUN,
        ),
    ] = False,
    plot: PlotOut = None,
    csv_path: CsvOut = None,
    json_path: SummaryOut = None,
    progress: ShowProgress = True,
) -> None:
    """Simulate RG and ARG exactly (many runs) and summarise how fast the error vanishes."""
    from continuized.gossip.errors import ConfigError, require_extra
    from continuized.gossip.files.destinations import check_file_destination
    from continuized.gossip.files.outputs import FIGURE_SUFFIXES, prepare_plotting
    from continuized.gossip.model.algorithms import check_algorithm

    started = time.perf_counter()
    with reported_errors():
        if plot is not None:
            require_extra("plot", ["matplotlib"], "--plot")
        names = [
            check_algorithm(a, problem=False, live=False) for a in (algorithms or ["rg", "arg"])
        ]
        if len(set(names)) != len(names):
            raise ConfigError(f"--algorithm given twice: {', '.join(algorithms or [])}")
        check_count("--runs", runs, 1)
        check_count("--grid-points", grid_points, 2)
        check_count("--dim", dim, 1)
        check_count("--seed", seed, 0)
        if workers is not None:
            check_count("--workers", workers, 1)
        if t_end is not None:
            check_positive("--t-end", t_end)
        check_positive("--eps", eps)
        if plot is not None:
            check_file_destination("--plot", plot, FIGURE_SUFFIXES)
            prepare_plotting()  # in the background, while the kernel runs
        if csv_path is not None:
            check_file_destination("--csv", csv_path)
        if json_path is not None:
            check_file_destination("--json", json_path)
        _say_engine()
        run = _simulate_graph(
            graph, names, runs, t_end, grid_points, values, dim, seed, workers, weighted, progress
        )
        summary = _summary(run, eps, values, dim, grid_points)
        summary["wall_seconds"] = time.perf_counter() - started
    saving = _write_outputs(run, summary, plot, csv_path, json_path, graph)
    _print_summary(graph, summary, saving.written)
    saving.finish(summary)


@reproduce_app.command("gossip-figure")
def gossip_figure(
    out: FigureDir = Path("figures"),
    runs: PanelRuns = 1000,
    grid_points: PanelGridPoints = 200,
    eps: Eps = 1e-6,
    seed: Seed = 0,
    workers: Workers = None,
    progress: ShowProgress = True,
) -> None:
    """Reproduce the paper's gossip figure: line 30, grid 15x15, complete 10; RG vs ARG."""
    from continuized.gossip.errors import require_extra
    from continuized.gossip.files.destinations import check_dir_destination
    from continuized.gossip.files.outputs import (
        plot_gossip_figure,
        prepare_plotting,
        write_csv,
        write_json,
    )

    started = time.perf_counter()
    saving = Saving("reproduce-gossip-figure")
    with reported_errors():
        require_extra("plot", ["matplotlib"], "gossip reproduce gossip-figure")
        check_count("--runs", runs, 1)
        check_count("--grid-points", grid_points, 2)
        check_count("--seed", seed, 0)
        if workers is not None:
            check_count("--workers", workers, 1)
        check_positive("--eps", eps)
        check_dir_destination("--out", out)
        _say_engine()
        prepare_plotting()  # in the background, while the kernel runs
        panels = []
        summaries = {}
        for spec, title, t_end in PAPER_GRAPHS:
            run = _simulate_graph(
                spec,
                ["rg", "arg"],
                runs,
                t_end,
                grid_points,
                "onehot",
                1,
                seed,
                workers,
                False,
                progress,
            )
            summary = _summary(run, eps, "onehot", 1, grid_points)
            stem = "gossip-" + spec.replace(":", "")
            saving.write("--out", out / f"{stem}.csv", partial(write_csv, results=run.results))
            saving.write("--out", out / f"{stem}.json", partial(write_json, data=summary))
            panels.append((title, run.results))
            summaries[spec] = summary
        figure = out / "gossip-figure.png"
        title = f"Randomized gossip vs accelerated gossip ({runs} runs each)"
        saving.write("--out", figure, lambda p: plot_gossip_figure(p, panels, title=title))
    for spec, summary in summaries.items():
        _print_summary(spec, summary, [], headline=False)
    _print_panels(summaries, eps)
    if not saving.failures:
        typer.echo(f"wrote {figure} and per-graph CSV/JSON in {out}/")
    typer.echo(f"wall time: {time.perf_counter() - started:.1f} s")
    saving.finish({"panels": summaries})


def _say_engine() -> None:
    """Say, in one line, that the simulator runs its NumPy engine where numba is missing."""
    from continuized.gossip.errors import install_command, missing_modules

    if missing_modules(["numba"]):
        warn(
            "numba is not installed: the simulator runs its NumPy engine (same results, "
            f"slower); for the compiled kernel: {install_command('sim')}",
            label="note",
        )


class _GraphRun:
    """One graph's simulations: the topology, its quantities and one result per algorithm."""

    def __init__(self, topology: Topology, quantities: GraphQuantities, t_end: float) -> None:
        self.topology = topology
        self.quantities = quantities
        self.t_end = t_end
        self.results: dict[str, SimulationResult] = {}


def _simulate_graph(
    spec: str,
    names: Sequence[str],
    runs: int,
    t_end: float | None,
    grid_points: int,
    values_spec: str,
    dim: int,
    seed: int,
    workers: int | None,
    weighted: bool,
    show_progress: bool,
) -> _GraphRun:
    import numpy as np

    from continuized.gossip.graph.spectral import graph_quantities
    from continuized.gossip.graph.topology import parse_topology
    from continuized.gossip.model.algorithms import gossip_params
    from continuized.gossip.model.values import initial_values
    from continuized.gossip.sim.compiled import kernel_compiles
    from continuized.gossip.sim.simulator import simulate

    topo = parse_topology(spec, weighted=weighted)
    q = graph_quantities(topo)
    initial = initial_values(values_spec, topo.n, dim=dim, rng_seed_default=seed)
    end = t_end if t_end is not None else float(np.ceil(20.0 / q.theta_arg))
    grid = np.linspace(0.0, end, grid_points)
    run = _GraphRun(topo, q, end)
    total = runs * end

    def describe(name: str) -> str:
        return f"{spec} {name}: {runs} runs to t={end:g}"

    # Asked only when the bar shows; a later graph of the same command finds it compiled.
    compiling = "the simulator's kernel" if show_progress and kernel_compiles() else None
    with progress_bar(show_progress, describe, compiling) as report:
        for name in names:
            params = gossip_params(name, q.mu_gossip, q.r_max)
            report(name, 0, total)  # the bar shows before the first run ends

            def update(done: int, name: str = name) -> None:
                report(name, done, total)

            run.results[name] = simulate(
                topo, params, initial, grid, runs, seed, update, workers=workers
            )
            report(name, total, total)
    return run


def _summary(
    run: _GraphRun, eps: float, values_spec: str, dim: int, grid_points: int
) -> dict[str, Any]:
    from continuized.gossip.files.outputs import algorithm_summary

    algos = {name: algorithm_summary(r, eps) for name, r in run.results.items()}
    summary: dict[str, Any] = {
        "graph": run.topology.spec,
        "values": values_spec,
        "dim": dim,
        "t_end": run.t_end,
        "grid_points": grid_points,
        "eps": eps,
        "quantities": run.quantities.as_dict(),
        "algorithms": algos,
    }
    rg, arg = algos.get("rg"), algos.get("arg")
    if rg and arg and rg["t_eps"] is not None and arg["t_eps"]:
        summary["speedup_t_eps"] = rg["t_eps"] / arg["t_eps"]
    return summary


def _write_outputs(
    run: _GraphRun,
    summary: dict[str, Any],
    plot: Path | None,
    csv_path: Path | None,
    json_path: Path | None,
    label: str,
) -> Saving:
    from continuized.gossip.files.outputs import plot_gossip_figure, write_csv, write_json

    saving = Saving("simulate")
    saving.write("--plot", plot, lambda path: plot_gossip_figure(path, [(label, run.results)]))
    saving.write("--csv", csv_path, lambda path: write_csv(path, run.results))
    saving.write("--json", json_path, lambda path: write_json(path, summary))
    return saving


def _print_panels(summaries: dict[str, dict[str, Any]], eps: float) -> None:
    """One line per panel of the figure: RG's and ARG's t_eps, and how much sooner ARG is."""

    def t_eps(summary: dict[str, Any], name: str) -> str:
        hit = summary["algorithms"][name]["t_eps"]
        return "never" if hit is None else f"{hit:.6g}"

    table = figures_table(
        f"t where the median error reaches {eps:g}, per panel",
        ["graph", "RG t_eps", "ARG t_eps", "RG / ARG"],
    )
    for spec, summary in summaries.items():
        ratio = summary.get("speedup_t_eps")
        arg_hit = summary["algorithms"]["arg"]["t_eps"]
        if ratio is not None:
            speedup = f"{ratio:.2f}x"
        elif arg_hit and summary["algorithms"]["rg"]["t_eps"] is None:
            # RG had not reached eps by the panel's end: the ratio is at least this.
            speedup = f"> {summary['t_end'] / arg_hit:.2f}x"
        else:
            speedup = "unknown"
        table.add_row(spec, t_eps(summary, "rg"), t_eps(summary, "arg"), speedup)
    plain_console().print(table)


def _print_summary(
    graph: str, summary: dict[str, Any], written: Sequence[Path], headline: bool = True
) -> None:
    q = summary["quantities"]
    table = figures_table(
        f"{graph}: n={q['n']}, |E|={q['n_edges']}, mu={q['mu_gossip']:.4g}, "
        f"R_max={q['r_max']:.4g}; eps={summary['eps']:g}",
        ["algorithm", "theta", "t_eps", "final median", "final mean", "runs"],
    )
    for name, a in summary["algorithms"].items():
        t_hit = "never" if a["t_eps"] is None else f"{a['t_eps']:.6g}"
        table.add_row(
            name,
            f"{a['theta']:.4g}",
            t_hit,
            f"{a['final_median']:.3e}",
            f"{a['final_mean']:.3e}",
            str(a["runs"]),
        )
    console = plain_console()
    console.print(table)
    if headline and "speedup_t_eps" in summary:
        console.print(f"on {graph}, ARG reaches eps {summary['speedup_t_eps']:.2f}x sooner than RG")
    for path in written:
        console.print(f"wrote {path}")
