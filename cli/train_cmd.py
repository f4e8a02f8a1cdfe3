"""``gossip train`` and ``gossip reproduce training-figure``: decentralized training, simulated."""

from __future__ import annotations

import math
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from continuized.cli._app import app, reproduce_app
from continuized.cli._errors import reported_errors
from continuized.cli._progress import progress_bar
from continuized.cli._saving import Saving
from continuized.cli.options.batch_runs import (
    GridPoints,
    PanelGridPoints,
    PanelRuns,
    Runs,
    Seed,
    check_count,
    check_positive,
    seed_option,
)
from continuized.cli.options.envvars import option
from continuized.cli.options.output import CsvOut, FigureDir, PlotOut, ShowProgress, SummaryOut
from continuized.cli.options.panels import OBJECTIVE, RUN, TRAINING
from continuized.cli.options.training import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CONSENSUS_EPS,
    DEFAULT_INIT,
    DEFAULT_LR,
    DEFAULT_MOMENTUM,
    DEFAULT_RATE_COM,
    SimConsensusEps,
    SimHorizon,
    SimLr,
    SimMomentum,
)

if TYPE_CHECKING:
    from continuized.gossip.train import TrainingProblem, TrainingResult

__all__ = ["train_cmd", "training_figure"]

_FIGURE_GRAPHS = ("cycle:16", "grid:4x4", "complete:16")
_FIGURE_SPLITS = ("iid:0", "dirichlet:0.1:0")
_FIGURE_ALGORITHMS = ("a2cid2", "adpsgd", "local", "allreduce")


@app.command("train")
def train_cmd(
    graph: Annotated[
        str,
        option(
            "Topology: cycle:16, grid:4x4, complete:16, ...",
            "GRAPH",
            "--graph",
            rich_help_panel=RUN,
        ),
    ] = "cycle:16",
    model: Annotated[
        str,
        option(
            "Model: softmax, mlp:H, mlp:H1:H2 or module:callable.",
            "MODEL",
            "--model",
            rich_help_panel=TRAINING,
        ),
    ] = "mlp:64",
    data: Annotated[
        str,
        option(
            "Classification data: digits, wine, iris, breast-cancer, npz:PATH, svmlight:PATH, "
            "csv:FILE.",
            "DATA",
            "--data",
            rich_help_panel=OBJECTIVE,
        ),
    ] = "digits",
    split: Annotated[
        str,
        option(
            "How training rows go to nodes: iid:SEED, dirichlet:ALPHA:SEED, shards:K:SEED, "
            "label:SEED.",
            "SPLIT",
            "--split",
            rich_help_panel=OBJECTIVE,
        ),
    ] = "iid:0",
    algorithms: Annotated[
        list[str] | None,
        option(
            "a2cid2, adpsgd, local or allreduce; repeat for several (default a2cid2 and adpsgd).",
            "ALGORITHM",
            "--algorithm",
            rich_help_panel=RUN,
        ),
    ] = None,
    rate_com: Annotated[
        float,
        option(
            "Communications per node per gradient step (per unit of t).",
            "RATE_COM",
            "--rate-com",
            rich_help_panel=TRAINING,
        ),
    ] = DEFAULT_RATE_COM,
    t_end: SimHorizon = 200.0,
    grid_points: GridPoints = 41,
    runs: Runs = 3,
    lr: SimLr = DEFAULT_LR,
    momentum: SimMomentum = DEFAULT_MOMENTUM,
    batch_size: Annotated[
        int, option("Rows per mini-batch.", "BATCH_SIZE", "--batch-size", rich_help_panel=TRAINING)
    ] = DEFAULT_BATCH_SIZE,
    dtype: Annotated[
        str,
        option(
            "Parameters' type: float32 or float64.", "DTYPE", "--dtype", rich_help_panel=TRAINING
        ),
    ] = "float64",
    test_fraction: Annotated[
        float,
        option(
            "Rows held out for the test set.",
            "TEST_FRACTION",
            "--test-fraction",
            rich_help_panel=TRAINING,
        ),
    ] = 0.2,
    init: Annotated[
        str,
        option(
            "Initial models: common (one for all nodes) or per-node (measures consensus).",
            "INIT",
            "--init",
            rich_help_panel=TRAINING,
        ),
    ] = DEFAULT_INIT,
    target: Annotated[
        float,
        option(
            "Test accuracy for the 't to target' figure.",
            "TARGET",
            "--target-accuracy",
            rich_help_panel=TRAINING,
        ),
    ] = 0.9,
    consensus_eps: SimConsensusEps = DEFAULT_CONSENSUS_EPS,
    seed: Annotated[int, seed_option("Seed of the runs and the test rows.")] = 0,
    plot: PlotOut = None,
    csv_path: CsvOut = None,
    json_path: SummaryOut = None,
    progress: ShowProgress = True,
) -> None:
    """Train a model over a graph, simulated exactly: A²CiD² against AD-PSGD, local, all-reduce.

    Exit 2: a bad setting, refused before any work; 1: a run diverged (its loss not finite, or
    over 1e6 times its start: the table says which); 3: an output could not be written.
    """
    from continuized.gossip.datasets.sources import require_source
    from continuized.gossip.errors import require_extra

    with reported_errors():
        require_source(data)
        if plot is not None:
            require_extra("plot", ["matplotlib"], "--plot")
    import numpy as np
    from rich.console import Console

    from continuized.cli._train_output import plot_training, training_summary, write_training_csv
    from continuized.gossip.errors import ConfigError
    from continuized.gossip.files.destinations import check_file_destination
    from continuized.gossip.files.outputs import FIGURE_SUFFIXES, write_json
    from continuized.gossip.train import ALGORITHMS, make_problem, run_training

    started = time.perf_counter()
    console = Console()
    with reported_errors():
        names = _algorithms(algorithms or ["a2cid2", "adpsgd"], ALGORITHMS)
        check_count("--runs", runs, 1)
        check_count("--grid-points", grid_points, 2)
        check_count("--seed", seed, 0)
        check_positive("--t-end", t_end)
        if not 0.0 < target <= 1.0:
            raise ConfigError(f"--target-accuracy must be in (0, 1], got {target!r}")
        if init not in ("common", "per-node"):
            raise ConfigError(f"--init must be common or per-node, got {init!r}")
        if not (math.isfinite(consensus_eps) and consensus_eps > 0):
            raise ConfigError(f"--consensus-eps must be a finite number > 0, got {consensus_eps!r}")
        if plot is not None:
            check_file_destination("--plot", plot, FIGURE_SUFFIXES)
        if csv_path is not None:
            check_file_destination("--csv", csv_path)
        if json_path is not None:
            check_file_destination("--json", json_path)
        problem = make_problem(
            graph,
            model,
            data,
            split,
            rate_com=rate_com,
            lr=lr,
            momentum=momentum,
            batch_size=batch_size,
            dtype=dtype,
            test_fraction=test_fraction,
            seed=seed,
            per_node_init=init == "per-node",
        )
        _describe(console, problem)
        grid = np.linspace(0.0, t_end, grid_points)
        with progress_bar(progress) as report:
            results = run_training(problem, names, grid, runs, seed, progress=report)
        summary = training_summary(
            results,
            target,
            consensus_eps,
            **_context(problem, graph, model, data, split, runs, seed, t_end, init),
            wall_seconds=time.perf_counter() - started,
        )
    title = f"{graph}, {model}, {data}, {split}, rate-com {rate_com:g}, {runs} runs"
    metrics = ("loss", "accuracy", "node_accuracy", "consensus")
    saving = Saving("train")
    saving.write(
        "--plot", plot, lambda p: plot_training(p, [(graph, results)], metrics, title=title)
    )
    saving.write("--csv", csv_path, partial(write_training_csv, results=results))
    saving.write("--json", json_path, lambda p: write_json(p, summary))
    _table(console, summary, results)
    for path in saving.written:
        console.print(f"wrote {path}", highlight=False)
    saving.finish(summary)
    _diverged(summary)


@reproduce_app.command("training-figure")
def training_figure(
    out: FigureDir = Path("figures"),
    runs: PanelRuns = 2,
    t_end: SimHorizon = 100.0,
    grid_points: PanelGridPoints = 21,
    lr: SimLr = DEFAULT_LR,
    momentum: SimMomentum = DEFAULT_MOMENTUM,
    seed: Seed = 0,
    progress: ShowProgress = True,
) -> None:
    """Digits + MLP on cycle:16, grid:4x4 and complete:16, iid and Dirichlet(0.1) shards:
    accuracy and consensus distance of a2cid2, adpsgd, local and allreduce against t."""
    from continuized.gossip.errors import require_extra

    with reported_errors():
        require_extra("data", ["sklearn"], "gossip reproduce training-figure")
        require_extra("plot", ["matplotlib"], "gossip reproduce training-figure")
    import numpy as np
    from rich.console import Console

    from continuized.cli._train_output import (
        TITLES,
        plot_training,
        training_summary,
        write_training_csv,
    )
    from continuized.gossip.files.destinations import check_dir_destination
    from continuized.gossip.files.outputs import write_json
    from continuized.gossip.train import make_problem, run_training

    started = time.perf_counter()
    console = Console()
    saving = Saving("reproduce-training-figure")
    with reported_errors():
        check_count("--runs", runs, 1)
        check_count("--grid-points", grid_points, 2)
        check_count("--seed", seed, 0)
        check_positive("--t-end", t_end)
        check_dir_destination("--out", out)
        grid = np.linspace(0.0, t_end, grid_points)
        panels: list[tuple[str, dict[str, TrainingResult]]] = []
        summaries: dict[str, Any] = {}
        files = []
        with progress_bar(progress) as report:
            for split in _FIGURE_SPLITS:  # rows of the figure: iid, then label skew
                for graph in _FIGURE_GRAPHS:
                    label = f"{graph}, {split.rsplit(':', 1)[0]}"
                    problem = make_problem(
                        graph, "mlp:64", "digits", split, lr=lr, momentum=momentum, seed=seed
                    )

                    def tick(name: str, done: float, total: float, label: str = label) -> None:
                        report(f"{label}: {name}", done, total)

                    results = run_training(problem, _FIGURE_ALGORITHMS, grid, runs, seed, tick)
                    panels.append((label, results))
                    stem = f"training-{graph.replace(':', '')}-{split.split(':')[0]}"
                    saving.write(
                        "--out", out / f"{stem}.csv", partial(write_training_csv, results=results)
                    )
                    files.append(f"{stem}.csv")
                    summaries[label] = training_summary(
                        results,
                        0.9,
                        **_context(
                            problem, graph, "mlp:64", "digits", split, runs, seed, t_end, "common"
                        ),
                    )
        setting = f"digits, MLP 64, rate-com 1, lr {lr:g}, momentum {momentum:g}, {runs} runs"
        for metric, note in (
            ("accuracy", ""),
            ("consensus", " (all-reduce: 0, off the log scale)"),
        ):
            title = f"{setting}: {TITLES[metric]}{note}"
            saving.write(
                "--out",
                out / f"training-{metric}.png",
                partial(plot_training, panels=panels, metrics=(metric,), title=title),
            )
            files.append(f"training-{metric}.png")
        figure = {"panels": summaries, "wall_seconds": time.perf_counter() - started}
        saving.write("--out", out / "training-figure.json", lambda p: write_json(p, figure))
        files.append("training-figure.json")
    for label, summary in summaries.items():
        _table(console, summary, dict(panels)[label], title=label)
    if not saving.failures:
        console.print(
            f"wrote {', '.join(files)} to {out}/ in {time.perf_counter() - started:.1f} s",
            highlight=False,
        )
    saving.finish(figure)
    for summary in summaries.values():
        _diverged(summary)


def _algorithms(names: list[str], valid: tuple[str, ...]) -> list[str]:
    from continuized.gossip.errors import ConfigError

    out: list[str] = []
    for name in names:
        key = name.strip().lower()
        if key not in valid:
            raise ConfigError(f"unknown algorithm {name!r}; valid algorithms: " + ", ".join(valid))
        if key in out:
            raise ConfigError(f"--algorithm {key} is given twice; give each algorithm once")
        out.append(key)
    return out


def _context(
    problem: TrainingProblem,
    graph: str,
    model: str,
    data: str,
    split: str,
    runs: int,
    seed: int,
    t_end: float,
    init: str,
) -> dict[str, Any]:
    return {
        "graph": graph,
        "n": problem.topology.n,
        "model": model,
        "model_description": problem.model.description,
        "data": data,
        "split": split,
        "data_description": problem.data.description,
        "runs": runs,
        "seed": seed,
        "t_end": t_end,
        "init": init,
        "lr": problem.sgd.lr,
        "momentum": problem.sgd.momentum,
        "batch_size": problem.batch_size,
        "constants": problem.constants.as_dict(),
    }


def _describe(console: Any, problem: TrainingProblem) -> None:
    c = problem.constants
    console.print(problem.data.description, highlight=False)
    console.print(problem.model.description, highlight=False)
    console.print(
        f"{problem.topology.spec}: rate-com {c.rate_com:g} per node, chi1 = {c.chi1:.4g}, "
        f"chi2 = {c.chi2:.4g}: a2cid2 eta = {c.eta:.4g}, alpha~ = {c.alpha_tilde:.4g}",
        highlight=False,
    )


def _diverged(summary: dict[str, Any]) -> None:
    """Exit 1, naming them, if runs diverged (:func:`gossip.train.scores.diverged`)."""
    from continuized.cli._errors import fail
    from continuized.gossip.train.scores import DIVERGED_GROWTH

    gone = {
        name: a["diverged_runs"] for name, a in summary["algorithms"].items() if a["diverged_runs"]
    }
    if not gone:
        return
    which = ", ".join(
        f"{name} ({len(runs)} of {summary['runs']} runs)" for name, runs in gone.items()
    )
    raise fail(
        f"diverged: {which}: the loss became non-finite or over {DIVERGED_GROWTH:g} times its "
        f"start; try a smaller --lr (it was {summary['lr']:g}) or --momentum "
        f"(it was {summary['momentum']:g})",
        1,
    )


def _table(
    console: Any, summary: dict[str, Any], results: dict[str, TrainingResult], title: str = ""
) -> None:
    from rich.table import Table

    t_end = summary["t_end"]
    columns = ["algorithm", "loss", "test acc.", "node acc.", "consensus", "t to acc."]
    first: dict[str, Any] = next(iter(summary["algorithms"].values()), {})
    eps = ""
    if "t_to_consensus" in first:
        columns.append("t to cons.")
        eps = f"; cons. <= {first['t_to_consensus']['eps']:g}"
    table = Table(title=title or f"at t = {t_end:g} (median over {summary['runs']} runs{eps})")
    for column in columns:
        table.add_column(column, justify="right")
    for name, a in summary["algorithms"].items():
        final = a["final"]
        reach = a["t_to_accuracy"]
        gone = len(a["diverged_runs"])
        loss = f"{final['loss']['median']:.4g}"
        if gone:
            loss = "diverged" if gone == a["runs"] else f"{loss} ({gone} diverged)"
        row = [
            name,
            loss,
            _percent(final["accuracy"]["median"]),
            _percent(final["node_accuracy"]["median"]),
            f"{final['consensus']['median']:.3e}",
            f"{reach['target']:.0%}: " + _reached(reach["median"]),
        ]
        if "t_to_consensus" in a:
            row.append(_reached(a["t_to_consensus"]["median"]))
        table.add_row(*row)
    console.print(table)


def _reached(t: float | None) -> str:
    """The median t to a threshold, or ``never`` (half the runs or more never got there)."""
    return "never" if t is None else f"{t:.4g}"


def _percent(value: float) -> str:
    return "unknown" if math.isnan(value) else f"{value:.1%}"
