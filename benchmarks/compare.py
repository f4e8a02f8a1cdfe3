"""Speed across commits: the same benchmarks on two trees, alternated in one run, as ratios.

Run through ``scripts/bench-compare BASE [HEAD]`` (a commit, a branch, or ``.``: this checkout
as it is, uncommitted changes included; HEAD defaults to ``.``). Each tree is a git worktree
(kept in ``~/.cache/gossip-bench-compare`` for the next run); its code is put first on
``PYTHONPATH`` of every process a case starts, so one installed environment serves both. The
benchmark drivers are this checkout's: a case measures each tree through the same driver.

The cases (``--cases``, all by default):

``live``
    ``gossip up --graph line:30 --algorithm arg --values onehot`` at ``--rate`` (3,000/s),
    one process per node, for ``--seconds`` (20 s): the run summary's round trip p50 and p99,
    its achieved rate, and the node processes' CPU per activation (their CPU time sampled
    every half second; the median of the half-second rates, which lie on the run's plateau
    rather than on its start-up, over the achieved rate).
``host``
    The same on ``grid:8x8``, 16 nodes per process (host mode).
``core``
    ``bench_exchange_core.py``: the exchange's CPU per round trip, in process, no sockets (the
    least of three runs: see :func:`core`).
``sim``
    ``gossip simulate --graph line:30 --runs 1000 --t-end 40000``: its wall time (after one
    run of each tree that fills the compiled kernels' caches).
``wire``
    ``bench_train_wire.py --dtype float32``: a million-parameter model's exchange p50 and its
    ratio to raw pyzmq's in the same run. A tree without the training exchange says n/a.

Every case runs ``--rounds`` times (3) per tree, the trees alternated and their order swapped
every round, so that a machine that slows down or speeds up weighs on both alike. The table
gives each figure's median per tree, the ratio (above 1: the head is worse, whichever way the
figure goes) and the run-to-run spread (the larger of the two trees' half-ranges, relative to
their medians). A figure is flagged ``WORSE`` when its ratio exceeds ``1 + --tolerance``
(0.15) plus that spread: a loss the noise of this machine does not explain.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = Path.home() / ".cache" / "gossip-bench-compare"

Figures = dict[str, float | None]


@dataclass(frozen=True)
class Figure:
    """One measured quantity: its key in a case's figures, its label and unit, and which way
    is better."""

    key: str
    label: str
    unit: str
    lower_is_better: bool = True


@dataclass
class Tree:
    """A commit's code on disk: ``root`` goes first on ``PYTHONPATH``; ``gossip`` is its
    command line (its ``pyproject.toml``'s console script, run with this interpreter)."""

    name: str
    root: Path
    gossip: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The environment of a process that runs this tree's code."""
        path = [str(self.root), str(HERE), os.environ.get("PYTHONPATH", "")]
        # The drivers import the tree's modules through benchmarks/_project.py: from the one
        # installed name, or, in a tree from before it, from the bare folders.
        package = "continuized" if (self.root / "continuized" / "__init__.py").is_file() else ""
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in path if p),
            "GOSSIP_BENCH_PACKAGE": package,
        }


def git(*args: str) -> str:
    """Run git in this checkout; return its output, stripped."""
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def console_script(root: Path) -> list[str]:
    """The command that runs the tree's ``gossip`` entry point with this interpreter."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    target = project["project"]["scripts"]["gossip"]
    module, _, func = target.partition(":")
    code = f"import sys; sys.argv[0] = 'gossip'; from {module} import {func}; sys.exit({func}())"
    return [sys.executable, "-c", code]


def checkout(rev: str) -> Tree:
    """The tree of ``rev`` (``.``: this checkout as it is), as a detached worktree."""
    if rev == ".":
        return Tree(f". ({git('rev-parse', '--short', 'HEAD')}+)", ROOT, console_script(ROOT))
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    root = CACHE / sha
    if not (root / "pyproject.toml").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        git("worktree", "prune")
        git("worktree", "add", "--detach", "--force", str(root), sha)
    return Tree(f"{rev} ({sha[:7]})", root, console_script(root))


class CpuSampler:
    """Samples the CPU time of a process tree every ``period`` seconds, in a thread."""

    def __init__(self, pid: int, period: float = 0.5) -> None:
        self._root = psutil.Process(pid)
        self._root_cmdline = self._root.cmdline()
        self._period = period
        self._stop = threading.Event()
        self.rates: list[float] = []  # cores over each period
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _total(self, procs: dict[int, psutil.Process]) -> dict[int, float]:
        out: dict[int, float] = {}
        with contextlib.suppress(psutil.Error):
            for child in self._root.children(recursive=True):
                procs.setdefault(child.pid, child)
        for pid, proc in list(procs.items()):
            try:
                # The node processes only: not the broker, nor the coordinator's helpers (the
                # simulator's band, computed aside: a fork of it, or its offload module, whose
                # path differs between the trees compared).
                cmdline = proc.cmdline()
                if (
                    proc.name() == "mosquitto"
                    or cmdline == self._root_cmdline
                    or any(arg.endswith(".offload") for arg in cmdline)
                ):
                    continue
                times = proc.cpu_times()
                out[pid] = times.user + times.system
            except psutil.Error:
                procs.pop(pid)
        return out

    def _run(self) -> None:
        procs: dict[int, psutil.Process] = {}
        before = self._total(procs)
        while not self._stop.wait(self._period):
            now = self._total(procs)
            common = now.keys() & before.keys()
            if common:
                self.rates.append(sum(now[p] - before[p] for p in common) / self._period)
            before = now

    def plateau(self) -> float | None:
        """The median of the sampled rates (cores): the run's steady state."""
        return statistics.median(self.rates) if len(self.rates) >= 5 else None


def live(tree: Tree, graph: str, rate: float, seconds: float, per_process: int) -> Figures:
    """One fixed-length live run: round trips, achieved rate, node CPU per activation."""
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "run.json"
        argv = [
            *tree.gossip, "up", "--graph", graph, "--algorithm", "arg", "--values", "onehot",
            "--rate", f"{rate:g}", "--until", "1e-300", "--timeout", f"{seconds:g}",
            "--json", str(summary), "--metrics-file", str(Path(tmp) / "metrics.jsonl"),
        ]  # fmt: skip
        if per_process > 1:
            argv += ["--nodes-per-process", str(per_process)]
        proc = subprocess.Popen(
            argv, env=tree.env(), cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        with CpuSampler(proc.pid) as cpu:
            proc.wait()
        if not summary.exists():
            return {}
        data = json.loads(summary.read_text())
    achieved = data.get("rate_achieved")
    cores = cpu.plateau()
    return {
        "rtt_p50_ms": data.get("rtt_p50_ms"),
        "rtt_p99_ms": data.get("rtt_p99_ms"),
        "rate_achieved": achieved,
        "cpu_us_per_activation": 1e6 * cores / achieved if cores and achieved else None,
    }


def last_json(argv: Sequence[str], tree: Tree) -> dict[str, float]:
    """Run ``argv`` with the tree's code; return the JSON object of its last output line."""
    done = subprocess.run(argv, env=tree.env(), capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {}
    return dict(json.loads(lines[-1]))


def core(tree: Tree, tries: int = 3) -> Figures:
    """The exchange's CPU per round trip (bench_exchange_core.py): the least of ``tries`` runs.

    The least, because this machine's speed for one process comes in two modes, seconds long,
    whichever the tree (60 or 95 us per exchange for the same code, pinned to either core): the
    median of a few runs falls on one mode or the other by chance."""
    runs = [
        last_json([sys.executable, str(HERE / "bench_exchange_core.py")], tree).get(
            "cpu_us_per_exchange"
        )
        for _ in range(tries)
    ]
    measured = [float(r) for r in runs if r is not None]
    return {"cpu_us_per_exchange": min(measured) if measured else None}


def wire(tree: Tree) -> Figures:
    """A million float32 parameters' exchange against raw pyzmq (bench_train_wire.py)."""
    argv = [sys.executable, str(HERE / "bench_train_wire.py"), "--dtype", "float32"]
    out = last_json([*argv, "--rounds", "30"], tree)
    return {
        "exchange_p50_ms": out.get("exchange_p50_ms"),
        "throughput_ratio": out.get("throughput_ratio"),
    }


def sim(tree: Tree) -> Figures:
    """Wall seconds of 1,000 exact simulator runs on line:30."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [*tree.gossip, "simulate", "--graph", "line:30", "--runs", "1000"]
        argv += ["--t-end", "40000", "--json", str(Path(tmp) / "sim.json")]
        start = time.perf_counter()
        done = subprocess.run(argv, env=tree.env(), capture_output=True, cwd=tmp)
        wall = time.perf_counter() - start
    return {"wall_s": wall if done.returncode == 0 else None}


@dataclass(frozen=True)
class Case:
    """A benchmark: how to run it on a tree, and the figures it gives."""

    name: str
    run: Callable[[Tree], Figures]
    figures: tuple[Figure, ...]
    warm_up: bool = False  # run once per tree, unrecorded, before the rounds


def cases(args: argparse.Namespace) -> dict[str, Case]:
    """Every case, by name, with this run's settings."""
    live_figures = (
        Figure("rtt_p50_ms", "round trip p50", "ms"),
        Figure("rtt_p99_ms", "round trip p99", "ms"),
        Figure("rate_achieved", "achieved rate", "/s", lower_is_better=False),
        Figure("cpu_us_per_activation", "node CPU per activation", "us"),
    )
    return {
        "live": Case(
            "live",
            lambda t: live(t, "line:30", args.rate, args.seconds, 1),
            live_figures,
        ),
        "host": Case(
            "host",
            lambda t: live(t, "grid:8x8", args.rate, args.seconds, 16),
            live_figures,
        ),
        "core": Case("core", core, (Figure("cpu_us_per_exchange", "CPU per exchange", "us"),)),
        "sim": Case("sim", sim, (Figure("wall_s", "line:30, 1,000 runs", "s"),), warm_up=True),
        "wire": Case(
            "wire",
            wire,
            (
                Figure("exchange_p50_ms", "1M float32 exchange p50", "ms"),
                Figure("throughput_ratio", "exchange / raw pyzmq", "x", lower_is_better=False),
            ),
        ),
    }


def spread(values: list[float]) -> float:
    """Half the range of ``values`` relative to their median (0 for fewer than two)."""
    if len(values) < 2:
        return 0.0
    mid = statistics.median(values)
    return (max(values) - min(values)) / 2 / abs(mid) if mid else 0.0


def verdicts(
    selected: list[Case],
    samples: dict[tuple[str, str, str], list[float]],
    trees: tuple[Tree, Tree],
    tolerance: float,
) -> list[dict[str, object]]:
    """One row per figure: medians, the worse-way ratio, the spread and the flag."""
    rows: list[dict[str, object]] = []
    for case in selected:
        for fig in case.figures:
            base = samples.get((case.name, fig.key, trees[0].name), [])
            head = samples.get((case.name, fig.key, trees[1].name), [])
            row: dict[str, object] = {"case": case.name, "figure": fig.label, "unit": fig.unit}
            row["base"] = statistics.median(base) if base else None
            row["head"] = statistics.median(head) if head else None
            row["base_samples"], row["head_samples"] = base, head
            ratio = None
            if base and head and row["base"] and row["head"]:
                b, h = float(row["base"]), float(row["head"])  # type: ignore[arg-type]
                ratio = h / b if fig.lower_is_better else b / h
            noise = max(spread(base), spread(head))
            row["ratio"], row["spread"] = ratio, noise
            row["worse"] = ratio is not None and ratio > 1 + tolerance + noise
            rows.append(row)
    return rows


def show(value: object) -> str:
    """A figure as the table prints it (n/a where a tree could not measure it)."""
    if value is None:
        return "n/a"
    assert isinstance(value, float | int)
    return f"{value:.4g}"


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, run the cases alternated, print the table; 1 if any is WORSE."""
    parser = argparse.ArgumentParser(
        prog="scripts/bench-compare",
        description="Benchmark two commits alternated in one run and print their ratios.",
    )
    parser.add_argument("base", help="the commit compared against (e.g. main, HEAD~1, 87ea835)")
    parser.add_argument("head", nargs="?", default=".", help="default: this checkout (.)")
    parser.add_argument("--cases", default="live,host,core,sim,wire", help="comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="runs per case and tree")
    parser.add_argument("--rate", type=float, default=3000.0, help="live rate, activations/s")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of a live run")
    parser.add_argument("--tolerance", type=float, default=0.15, help="flag past 1 + this")
    parser.add_argument("--json", type=Path, help="also write the rows and samples here")
    args = parser.parse_args(argv)
    known = cases(args)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or args.rounds < 1 or args.rate <= 0 or args.seconds <= 0:
        parser.error(f"--cases takes {', '.join(known)} (got {args.cases!r}); --rounds, --rate "
                     "and --seconds must be positive")  # fmt: skip
    trees = (checkout(args.base), checkout(args.head))
    selected = [known[n] for n in names]
    samples: dict[tuple[str, str, str], list[float]] = {}
    print(f"base {trees[0].name}  head {trees[1].name}  rounds {args.rounds}", flush=True)
    for case in selected:
        if case.warm_up:
            for tree in trees:
                case.run(tree)
    for r in range(args.rounds):
        for case in selected:
            for tree in trees if r % 2 == 0 else trees[::-1]:
                figures = case.run(tree)
                shown = " ".join(f"{k}={show(v)}" for k, v in figures.items())
                print(f"round {r + 1} {case.name:5} {tree.name}: {shown or 'n/a'}", flush=True)
                for key, value in figures.items():
                    if value is not None:
                        samples.setdefault((case.name, key, tree.name), []).append(float(value))
    rows = verdicts(selected, samples, trees, args.tolerance)
    print(f"\n{'case':5} {'figure':26} {'unit':4} {'base':>9} {'head':>9} {'ratio':>6} "
          f"{'spread':>6}")  # fmt: skip
    for row in rows:
        cells = [show(row[k]) for k in ("base", "head", "ratio", "spread")]
        flag = "  WORSE" if row["worse"] else ""
        print(f"{row['case']:5} {row['figure']:26} {row['unit']:4} {cells[0]:>9} {cells[1]:>9} "
              f"{cells[2]:>6} {cells[3]:>6}{flag}")  # fmt: skip
    print("ratio: head against base, above 1 is worse; spread: run-to-run, relative")
    if args.json:
        args.json.write_text(json.dumps({"trees": [t.name for t in trees], "rows": rows}))
    return 1 if any(row["worse"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
