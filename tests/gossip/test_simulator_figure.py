"""The figure's speed measures: plotting prepared in the background, labels without mathtext."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from gossip import report
from gossip.params import gossip_params
from gossip.simulator import SimulationResult


def _result(algorithm: str) -> SimulationResult:
    t = np.linspace(0.0, 100.0, 30)
    errors = 0.5 * np.exp(-0.2 * t)[None, :] * np.linspace(0.5, 2.0, 8)[:, None]
    return SimulationResult(t, errors, gossip_params(algorithm, 0.05, 4.0), 0.5, seed=1)


def test_prepared_plotting_draws_the_same_png_after_it(tmp_path: Path) -> None:
    results = {"rg": _result("rg"), "arg": _result("arg")}
    report.prepare_plotting()
    report.prepare_plotting()  # a second call starts nothing more
    warm = [t for t in threading.enumerate() if t.name == "gossip-plot-warm-up"]
    assert len(warm) <= 1
    first, second = tmp_path / "a.png", tmp_path / "b.png"
    report.plot_gossip_figure(first, [("g", results)], title="t")
    assert report._preparing is not None
    assert not report._preparing.is_alive()
    report.plot_gossip_figure(second, [("g", results)], title="t")
    assert first.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.parametrize(
    ("value", "label"),
    [(1.0, "10\u2070"), (1e-15, "10\u207b\u00b9\u2075"), (100.0, "10\u00b2"), (3e-7, "3e-07")],
)
def test_log_ticks_are_powers_of_ten_in_unicode(value: float, label: str) -> None:
    assert report._power_of_ten(value) == label
    assert report._power_of_ten(0.0) == ""
