"""The run's record on disk: the metrics file (JSON lines) and the summary (one JSON document).

Neither may end a run: a write that fails is noted in :attr:`RunLog.failures` (the outputs
were checked before the run, :mod:`gossip.files.destinations`; this is a disk that filled up
or a directory removed since) and the caller reports it with the result.

Metrics file: one JSON object per line, appended as the run goes, so a restarted coordinator
continues the same file. Every line has ``kind`` and ``wall`` (Unix seconds):

=============  ==========================================================================
``kind``       other fields
=============  ==========================================================================
``start``      run_id, graph, cluster, algorithm, params, quantities, expected, rate, eps,
               epoch (a fresh run)
``resume``     the same as ``start``, written by a coordinator that picked up a running run
``point``      t, error, mass_drift_rel, activations, nodes (reporting), fresh (bool): an
               estimate from reports of different times (:mod:`coordinator.figures.metrics`)
``exact``      t, error, mass_drift_rel: the network's exact state at a grid time every node
               has passed (:mod:`coordinator.figures.exact_curve`)
``reached``    t_eps, wall_s (seconds since the epoch): the exact curve's first crossing of
               eps (``null`` without an exact curve, ``exact`` false); t_eps_estimate (the
               estimates' crossing, if already confirmed); decided_s (seconds since the
               epoch when the coordinator decided: :mod:`coordinator.run.convergence`)
``stop``       reason (``reached`` or ``timeout``)
``final``      the run summary (see :class:`~coordinator.figures.state.RunSummary`) plus final_t
=============  ==========================================================================
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Any, TextIO

from continuized.gossip.files.destinations import unwritten

__all__ = ["RunLog", "write_json"]

_log = logging.getLogger(__name__)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


class RunLog:
    """Append-only JSON-lines metrics file; a no-op when ``path`` is ``None``.

    A write that fails (a full disk, a directory removed during the run) never stops the run:
    the file is given up and :attr:`failures` says why, for the run's end to report.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._file: TextIO | None = None
        self.failures: list[str] = []
        """What could not be written, one phrase each (``--json 'PATH' (reason)``); a failed
        metrics file is given up."""

    def open(self) -> None:
        """Open the file for appending (creating its directory)."""
        if self.path is not None and self._file is None and not self.failures:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            except OSError as exc:
                self._give_up(exc)

    def write(self, kind: str, **fields: Any) -> None:
        """Append one line ``{"kind": kind, "wall": now, **fields}`` and flush it."""
        if self._file is None:
            return
        line = {"kind": kind, "wall": time.time(), **_clean(fields)}
        try:
            self._file.write(json.dumps(line, allow_nan=False) + "\n")
            self._file.flush()
        except OSError as exc:
            self._give_up(exc)

    def save_summary(self, path: Path, record: dict[str, Any]) -> None:
        """Write the run's summary ``record`` to ``path`` (``--json``); a failure is noted in
        :attr:`failures`, not raised: the run's result stands, and its caller keeps it."""
        try:
            write_json(path, record)
        except OSError as exc:
            self.failures.append(unwritten("--json", path, exc))
            _log.warning("could not write %s", self.failures[-1])

    def _give_up(self, exc: OSError) -> None:
        assert self.path is not None
        self.failures.append(unwritten("--metrics-file", self.path, exc))
        _log.warning("the metrics file is given up: could not write %s", self.failures[-1])
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:  # the last lines' flush
                self._give_up(exc)
            self._file = None


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` as indented JSON (non-finite floats as null)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(data), indent=2, allow_nan=False) + "\n", encoding="utf-8")
