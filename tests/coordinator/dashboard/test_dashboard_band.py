"""The simulator's band, computed in a child process that never outlives its caller."""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import psutil
import pytest

from continuized.coordinator.dashboard.band import band_grid, compute_band, simulate_band
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.model.algorithms import gossip_params
from continuized.gossip.model.values import initial_values

pytestmark = pytest.mark.timeout(120)


def _setup(spec: str) -> tuple[object, object, np.ndarray]:
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    return topo, gossip_params("arg", q.mu_gossip, q.r_max), initial_values("onehot", topo.n)


async def test_band_from_the_child_equals_the_simulator_in_process() -> None:
    topo, params, initial = _setup("line:10")
    grid = band_grid(params.theta, params.bound_factor, 0.45, 1e-6)  # type: ignore[attr-defined]
    band = await compute_band(topo, params, initial, grid, runs=16, seed=5)  # type: ignore[arg-type]
    direct = simulate_band(topo, params, initial, grid, runs=16, seed=5)  # type: ignore[arg-type]
    assert band == direct
    assert len(band.t) == len(grid)
    assert band.q05[0] == pytest.approx(0.45)  # onehot on 10 nodes: e0 = 1/2 (1 - 1/10)
    assert all(a <= b <= c for a, b, c in zip(band.q05, band.q50, band.q95, strict=True))
    # The bound holds for the median at the end of the grid (where it is eps / 10).
    assert band.q50[-1] < 1e-6


async def test_cancelling_the_band_kills_its_child() -> None:
    topo, params, initial = _setup("grid:15x15")
    grid = np.linspace(0.0, 5e6, 50)  # far more work than the test waits for
    me = psutil.Process()
    task = asyncio.create_task(compute_band(topo, params, initial, grid, runs=64))  # type: ignore[arg-type]

    def band_children() -> list[psutil.Process]:
        # Only the band's: earlier tests may have left other children (multiprocessing's
        # resource tracker or forkserver live as long as this process).
        found = []
        for child in me.children():
            with contextlib.suppress(psutil.Error):
                if "continuized.coordinator.machine.offload" in " ".join(child.cmdline()):
                    found.append(child)
        return found

    for _ in range(100):
        await asyncio.sleep(0.05)
        if band_children():
            break
    children = band_children()
    assert children, "the band should run in a child process"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    _gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive
