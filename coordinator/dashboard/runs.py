"""Runs as the dashboard keeps them: the live run followed point by point, earlier runs archived.

Theory of operation
-------------------
The coordinator's :class:`~coordinator.figures.state.ClusterState` holds one run: its ``run_id``
and its error ``history``. :meth:`RunArchive.follow`, called on every tick of the feed, copies the
history points it has not seen yet into the live :class:`RunRecord` and returns them, so the
feed can send only what is new. When ``run_id`` changes (a new run in the same process) the old
record stays in the archive, which is what lets the page overlay RG and ARG runs.

With a ``runs_dir``, a run's record is written there as JSONL when it finishes (phase ``done`` or
``failed``) or when the dashboard stops, and every record found there is loaded at start, so
runs made by earlier coordinator processes are overlaid too. The file format is the JSONL
download format: one ``{"type": "run", ...}`` line of metadata, one ``{"type": "point", ...}``
line per history point, and a final ``{"type": "summary", ...}`` line when the run finished.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from continuized.coordinator.dashboard.views import initial_error
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.figures.thinning import since, thin

__all__ = ["Band", "Point", "RunArchive", "RunRecord", "parse_jsonl", "run_problem"]

_log = logging.getLogger(__name__)

Point = tuple[float, float, float, float]
"""``(t, error, mass_drift_rel, wall)``: one point of a run's error history."""

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True, slots=True)
class Band:
    """The simulator's expected error band on a grid of t: 5% and 95% quantiles and the median."""

    t: tuple[float, ...]
    q05: tuple[float, ...]
    q50: tuple[float, ...]
    q95: tuple[float, ...]
    runs: int

    def as_dict(self) -> dict[str, Any]:
        """Return the band as a JSON-ready dict (non-finite or non-positive values become None).

        Values that are not > 0 cannot be drawn on the log axis, so they are dropped too.
        """
        return {
            "t": list(self.t),
            "q05": [_pos(v) for v in self.q05],
            "q50": [_pos(v) for v in self.q50],
            "q95": [_pos(v) for v in self.q95],
            "runs": self.runs,
        }


@dataclass(slots=True)
class RunRecord:
    """One run's metadata and error history.

    Attributes
    ----------
    run_id : str
        The coordinator's run identifier.
    graph, algorithm : str
        Topology spec and ``rg``/``arg`` (``acd`` for an optimization run, the training
        algorithm, ``a2cid2``, ``adpsgd``, ..., for a training run).
    problem : str
        What the run computes (:func:`run_problem`): the optimization problem
        (``logistic:0.01``, ...), ``train softmax on digits`` for a training run, ``""`` for an
        averaging run. Runs are only drawn together when their problems are the same: they
        measure one quantity.
    theta, bound_factor : float or None
        The guaranteed rate and the constant of the bound ``bound_factor * e0 * exp(-theta t)``.
    e0 : float or None
        The initial error ``sum_v 1/2 |x_v(0) - mean|^2``.
    eps, rate : float
        Target error and the asked activation rate (per second).
    epoch : float or None
        Unix time of ``t = 0``.
    t_eps : float or None
        The run's exact curve's first crossing of ``eps``, once the coordinator declared it
        reached (:mod:`coordinator.run.convergence`); ``None`` before, and for a run that reached
        ``eps`` without an exact curve (its summary's ``reached`` says so).
    points : list of Point
        ``(t, error, mass_drift_rel, wall)`` in order: estimates from the reports.
    exact : list of Point
        The same, exact at the grid times every node has passed (:mod:`gossip.exchange.trace`).
    summary : dict or None
        The coordinator's run summary once the run finished.
    band, band_status : Band or None, str
        The simulator's band for this run and what became of its computation (``off``,
        ``pending``, ``ready``, or ``unavailable: <reason>``).
    live : bool
        True for the run the coordinator is currently running.
    """

    run_id: str
    graph: str = ""
    algorithm: str = ""
    problem: str = ""
    theta: float | None = None
    bound_factor: float | None = None
    e0: float | None = None
    eps: float = 0.0
    rate: float = 0.0
    epoch: float | None = None
    t_eps: float | None = None
    points: list[Point] = field(default_factory=list)
    exact: list[Point] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    band: Band | None = None
    band_status: str = "off"
    live: bool = False
    saved_len: int = -1  # stored() when last written to disk; -1: never
    dropped: int = 0  # points thinned out of a long live run (coordinator.figures.thinning)

    def stored(self) -> int:
        """How many points (estimated and exact) the record has taken, thinned ones included."""
        return len(self.points) + len(self.exact) + self.dropped

    def meta(self) -> dict[str, Any]:
        """Return everything but the points and the band, JSON-ready."""
        last = self.points[-1] if self.points else None
        return {
            "run_id": self.run_id,
            "graph": self.graph,
            "algorithm": self.algorithm,
            "problem": self.problem,
            "theta": _num(self.theta),
            "bound_factor": _num(self.bound_factor),
            "e0": _num(self.e0),
            "eps": _num(self.eps),
            "rate": _num(self.rate),
            "epoch": _num(self.epoch),
            # The run's own curve: the exact one, else (optimization, churn) the estimated one.
            "points": len(self.exact) or len(self.points),
            "t": _num(last[0]) if last else None,
            "error": _num(last[1]) if last else None,
            "t_eps": _num(self.t_eps),
            "reached": self.t_eps is not None or bool((self.summary or {}).get("reached")),
            "summary": self.summary,
            "band_status": self.band_status,
            "live": self.live,
        }

    def to_csv(self) -> str:
        """Return the history as CSV: header ``t,error,mass_drift_rel,wall``, one row per point."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["t", "error", "mass_drift_rel", "wall"])
        for point in self.points:
            writer.writerow([repr(float(v)) for v in point])
        return out.getvalue()

    def to_jsonl(self) -> str:
        """Return the run as JSONL: a ``run`` line, ``point`` and ``exact`` lines and maybe a
        ``summary`` line."""
        head = {"type": "run", **self.meta()}
        head.pop("points")
        head.pop("live")
        lines = [json.dumps(head, allow_nan=False)]
        typed = [("point", p) for p in self.points] + [("exact", p) for p in self.exact]
        for kind, (t, err, drift, wall) in typed:
            lines.append(
                json.dumps(
                    {
                        "type": kind,
                        "t": _num(t),
                        "error": _num(err),
                        "mass_drift_rel": _num(drift),
                        "wall": _num(wall),
                    },
                    allow_nan=False,
                )
            )
        if self.summary is not None:
            lines.append(json.dumps({"type": "summary", **self.summary}, allow_nan=False))
        return "\n".join(lines) + "\n"


def parse_jsonl(text: str) -> RunRecord:
    """Rebuild a :class:`RunRecord` from :meth:`RunRecord.to_jsonl` output.

    Raises
    ------
    ValueError
        If the text has no ``run`` line or a line is not a JSON object.
    """
    record: RunRecord | None = None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        item = json.loads(line)
        if not isinstance(item, dict):
            raise ValueError(f"line {lineno} is not a JSON object: {line[:60]!r}")
        kind = item.get("type")
        if kind == "run":
            record = RunRecord(
                run_id=str(item["run_id"]),
                graph=str(item.get("graph", "")),
                algorithm=str(item.get("algorithm", "")),
                # Files written before runs named their problem: an optimization run's
                # problem is unknown, so it is drawn with no other run.
                problem=str(item.get("problem", "?" if item.get("algorithm") == "acd" else "")),
                theta=item.get("theta"),
                bound_factor=item.get("bound_factor"),
                e0=item.get("e0"),
                eps=float(item.get("eps") or 0.0),
                rate=float(item.get("rate") or 0.0),
                epoch=item.get("epoch"),
                t_eps=item.get("t_eps"),
                band_status="off",
            )
        elif record is None:
            raise ValueError(f"line {lineno}: a 'run' line must come first, got type {kind!r}")
        elif kind in ("point", "exact"):
            (record.points if kind == "point" else record.exact).append(
                (
                    _float(item.get("t")),
                    _float(item.get("error")),
                    _float(item.get("mass_drift_rel")),
                    _float(item.get("wall")),
                )
            )
        elif kind == "summary":
            record.summary = {k: v for k, v in item.items() if k != "type"}
    if record is None:
        raise ValueError("no 'run' line found")
    return record


class RunArchive:
    """The runs the dashboard shows: the live one plus earlier ones (in memory and on disk).

    Parameters
    ----------
    runs_dir : Path, optional
        Where finished runs are written as ``<run_id>.jsonl`` and read back at start.
    keep : int
        Most runs kept (the oldest are forgotten first; files on disk are never deleted).
    """

    def __init__(self, runs_dir: Path | None = None, keep: int = 20) -> None:
        self.runs_dir = runs_dir
        self.keep = keep
        self.records: dict[str, RunRecord] = {}
        self.live: RunRecord | None = None
        self._index = 0  # history points of the live run already copied
        self._exact_index = 0  # exact points of the live run already copied
        if runs_dir is not None:
            self._load(runs_dir)

    def _load(self, runs_dir: Path) -> None:
        if not runs_dir.is_dir():
            return
        files = sorted(runs_dir.glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
        for path in files[-self.keep :]:
            try:
                record = parse_jsonl(path.read_text())
            except (OSError, ValueError, KeyError, TypeError) as exc:
                _log.warning("skipping run file %s: %s", path, exc)
                continue
            self.records[record.run_id] = record

    def follow(self, state: ClusterState) -> tuple[list[Point], bool]:
        """Copy the history points of ``state`` not yet seen into the live record.

        Returns
        -------
        (points, reset)
            The new points, and whether the live run changed (a new run started, or the history
            was replaced): then ``points`` is the whole history and the page must reload.
        """
        reset = False
        if not state.run_id:
            return [], False
        if self.live is None or self.live.run_id != state.run_id:
            self._start(state)
            reset = True
        live = self.live
        assert live is not None
        history, dropped = state.history, state.history_dropped
        if len(history) + dropped < self._index:
            # The coordinator started the history again under the same run id.
            live.points.clear()
            live.exact.clear()
            self._index = self._exact_index = 0
            reset = True
        new = [
            (p.t, p.error, p.mass_drift_rel, p.wall) for p in since(history, dropped, self._index)
        ]
        self._index = len(history) + dropped
        live.points.extend(new)
        live.dropped += thin(live.points)
        self._update_meta(live, state)
        if state.phase in ("done", "failed"):
            summary = _summary_of(state, live.run_id)
            if summary != live.summary or live.saved_len != live.stored():
                live.summary = summary
                self.save(live)
        return (list(live.points) if reset else new), reset

    def follow_exact(self, state: ClusterState) -> list[Point]:
        """Copy the exact points of ``state`` not yet seen into the live record; return them.

        Call it after :meth:`follow` (which starts a new live record when the run changes).
        """
        live = self.live
        if live is None or live.run_id != state.run_id:
            return []
        exact, dropped = state.exact, state.exact_dropped
        if len(exact) + dropped < self._exact_index:  # a new history under the same run id
            live.exact.clear()
            self._exact_index = 0
        new = [
            (p.t, p.error, p.mass_drift_rel, p.wall)
            for p in since(exact, dropped, self._exact_index)
        ]
        self._exact_index = len(exact) + dropped
        live.exact.extend(new)
        live.dropped += thin(live.exact)
        if new and state.phase in ("done", "failed"):
            self.save(live)  # the final reports complete the last grid times
        return new

    def _start(self, state: ClusterState) -> None:
        if self.live is not None:
            self.live.live = False
            if self.live.saved_len != self.live.stored():
                self.save(self.live)
        record = self.records.get(state.run_id)
        if record is None:
            record = RunRecord(run_id=state.run_id)
        record.points.clear()  # the coordinator's history is authoritative for the live run
        record.exact.clear()
        record.live = True
        record.saved_len = -1
        self.records.pop(state.run_id, None)
        self.records[state.run_id] = record
        while len(self.records) > self.keep:
            del self.records[next(iter(self.records))]
        self.live = record
        self._index = self._exact_index = 0

    @staticmethod
    def _update_meta(record: RunRecord, state: ClusterState) -> None:
        record.graph = state.graph
        record.eps = state.eps
        record.rate = state.rate
        record.epoch = state.epoch
        record.t_eps = state.t_eps
        if state.params is not None:
            record.algorithm = state.params.algorithm.value
            record.theta = state.params.theta
            record.bound_factor = state.params.bound_factor
        if state.optimization is not None:
            # sum_v |x_v - x*|^2 against t, and its rate line C exp(-theta t) (gossip.dual).
            record.algorithm = "acd"
            record.problem = state.optimization.task.problem
            record.bound_factor = 1.0
            record.e0 = state.optimization.task.bound_c
        elif state.training is not None:
            # Gradient steps move the models: the ARG parameters of its exchanges name no
            # algorithm of the run, and its error is not what a training run measures.
            record.algorithm = state.training.recipe.algorithm
            record.problem = run_problem(state)
        elif record.e0 is None and state.initial:
            record.e0 = initial_error(state.initial)

    def save(self, record: RunRecord) -> None:
        """Write ``record`` to ``runs_dir`` (if any) as ``<run_id>.jsonl``; log, never raise."""
        record.saved_len = record.stored()
        if self.runs_dir is None or not record.stored():
            return
        path = self.runs_dir / f"{_SAFE.sub('_', record.run_id) or 'run'}.jsonl"
        try:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(record.to_jsonl())
        except OSError as exc:
            # A full disk or a read-only directory must not take the coordinator down.
            _log.warning("could not save run %s to %s: %s", record.run_id, path, exc)

    def close(self, state: ClusterState) -> None:
        """Save the live run as it stands (called when the dashboard stops)."""
        live = self.live
        if live is not None and live.saved_len != live.stored():
            live.summary = _summary_of(state, live.run_id) or live.summary
            self.save(live)


def run_problem(state: ClusterState) -> str:
    """What the state's run computes, as :attr:`RunRecord.problem` names it: the optimization
    problem, ``train <model> on <data>`` for a training run, ``""`` for averaging."""
    if state.optimization is not None:
        return state.optimization.task.problem
    if state.training is not None:
        recipe = state.training.recipe
        return f"train {recipe.model} on {recipe.data}"
    return ""


def _summary_of(state: ClusterState, run_id: str) -> dict[str, Any] | None:
    for run in state.runs:
        if run.run_id == run_id:
            return run.as_dict()
    return None


def _num(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _pos(value: float) -> float | None:
    return float(value) if math.isfinite(value) and value > 0 else None


def _float(value: object) -> float:
    return float(value) if isinstance(value, int | float) else math.nan
