"""The paper's optimization figures fit their own canvas: no legend or label is clipped."""

from __future__ import annotations

import pytest

from continuized.gossip.optim.experiments import comparison_panels, noise_panels
from continuized.gossip.optim.figures import optim_figure


@pytest.mark.parametrize("which", ["comparison", "noise"])
def test_the_optim_figures_fit_their_canvas(which: str) -> None:
    panels = comparison_panels(4, 0) if which == "comparison" else noise_panels(4, 0)
    fig = optim_figure(panels, "Gradient descent, Nesterov and continuized Nesterov", "mean")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    legends = [legend for ax in fig.axes if (legend := ax.get_legend()) is not None]
    assert len(legends) == len(fig.axes)
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert fig.bbox.x0 <= box.x0
        assert box.x1 <= fig.bbox.x1
        assert fig.bbox.y0 <= box.y0
        assert box.y1 <= fig.bbox.y1
    tight = fig.get_tightbbox(renderer)  # every label, in inches
    width, height = fig.get_size_inches()
    assert tight.x0 >= 0
    assert tight.y0 >= 0
    assert tight.x1 <= width
    assert tight.y1 <= height
