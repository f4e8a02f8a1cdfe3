"""The optimization figure fits its own canvas: the shared legend is not clipped on any side."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from continuized.gossip.dual.experiment import run_experiment
from continuized.gossip.dual.network import build_network
from continuized.gossip.dual.report import optimization_figure
from continuized.gossip.graph.topology import parse_topology


def _inside(fig: Figure) -> None:
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    fig.canvas.draw()
    assert fig.legends
    for legend in fig.legends:
        box = legend.get_window_extent(renderer)
        assert fig.bbox.x0 <= box.x0
        assert box.x1 <= fig.bbox.x1
        assert fig.bbox.y0 <= box.y0
        assert box.y1 <= fig.bbox.y1
        # Below the axes, not over a curve.
        assert all(box.y1 <= ax.get_window_extent(renderer).y0 for ax in fig.axes)
    tight = fig.get_tightbbox(renderer)  # every label, in inches
    width, height = fig.get_size_inches()
    assert tight.x0 >= 0
    assert tight.y0 >= 0
    assert tight.x1 <= width
    assert tight.y1 <= height


@pytest.mark.parametrize(("panels", "columns"), [(1, 1), (4, 2)])
def test_the_optimization_figure_fits_its_canvas(panels: int, columns: int) -> None:
    # One panel: gossip optimize --plot, with all three algorithms (the legend's widest case);
    # four in two columns: the breast-cancer figure of gossip reproduce optimization-figure.
    topo = parse_topology("line:6")
    network = build_network("ridge:1", "breast-cancer", "iid:3", topo.n)
    grid = np.linspace(0.0, 200.0, 11)
    exp = run_experiment(topo, network.problems, ["acd", "cd", "dgd"], grid, 2, 1)
    named = [(f"line:6, ridge:1, breast-cancer #{i}", exp.results) for i in range(panels)]
    fig = optimization_figure(named, title="breast-cancer (iid split)", columns=columns)
    _inside(fig)
