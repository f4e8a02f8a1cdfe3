"""The figure's speed measures: plotting prepared in the background, labels without mathtext."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from continuized.gossip.files import outputs as report
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.sim.simulator import SimulationResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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


def _inside(fig: Figure) -> None:
    """Every legend, and every artist of the figure, lies inside the figure's own canvas."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    fig.canvas.draw()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert legends
    for legend in legends:
        assert fig.bbox.contains(*legend.get_window_extent(renderer).min)
        assert fig.bbox.contains(*legend.get_window_extent(renderer).max)
    tight = fig.get_tightbbox(renderer)  # in inches
    width, height = fig.get_size_inches()
    assert tight.x0 >= 0
    assert tight.y0 >= 0
    assert tight.x1 <= width
    assert tight.y1 <= height


@pytest.mark.parametrize("panels", [1, 3])
def test_the_gossip_figure_fits_its_canvas(panels: int) -> None:
    # One panel: gossip simulate --plot; three: gossip reproduce gossip-figure, with its title.
    results = {"rg": _result("rg"), "arg": _result("arg")}
    named = [(f"Complete graph, 10 nodes #{i}", results) for i in range(panels)]
    title = "Randomized gossip vs accelerated gossip (1000 runs each)" if panels > 1 else None
    _inside(report.gossip_figure(named, title))
