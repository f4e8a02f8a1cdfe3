"""The simulator's expected error band for the live run, computed in a child process.

The band is what the theory promises in distribution: the 5%, 50% and 95% quantiles of the
error ``sum_v 1/2 |x_v(t) - mean|^2`` over independent simulated runs of the same graph,
algorithm and initial values (``gossip.sim.simulator.simulate``, contract C1). A cluster whose curve
leaves the band for long is not running the algorithm it claims to.

It runs in a separate process, at low priority, because the simulator is CPU-bound Python and
numpy: in a thread it would hold the GIL and stall the coordinator's event loop (and with it the
registration, the MQTT monitor and this dashboard). It is a plain subprocess
(:func:`coordinator.machine.offload.offload`), killed if the dashboard stops first, so ``gossip
up`` never leaves it behind.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.coordinator.dashboard.runs import Band, RunArchive, RunRecord
from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.machine.offload import offload
from continuized.gossip.errors import ConfigError, GossipError
from continuized.gossip.graph.topology import Topology
from continuized.gossip.model.algorithms import GossipParams

__all__ = [
    "BAND_EVENT_BUDGET",
    "BandKeeper",
    "band_grid",
    "compute_band",
    "simulate_band",
    "simulate_opt_band",
]

BAND_EVENT_BUDGET = 2_000_000
"""Most activations simulated for one band (over all runs): bounds its CPU cost."""

_GRID_POINTS = 200
_TIME_LIMIT = 300.0  # seconds before the band's child process is killed

_log = logging.getLogger(__name__)


def band_grid(theta: float, bound_factor: float, e0: float, eps: float) -> NDArray[np.float64]:
    """Return the grid of t on which the band is computed: 0 up to where the bound is ``eps/10``.

    The theorem's bound ``bound_factor * e0 * exp(-theta t)`` crosses ``eps / 10`` at
    ``t = ln(10 bound_factor e0 / eps) / theta``; a run that follows the theory has reached ``eps``
    well before that.

    Examples
    --------
    >>> g = band_grid(theta=0.1, bound_factor=2.0, e0=0.5, eps=1e-6)
    >>> len(g), round(float(g[-1]), 1)
    (200, 161.2)
    """
    if not (theta > 0 and e0 > 0 and eps > 0):
        raise ConfigError(
            f"band needs theta > 0, e0 > 0 and eps > 0; got theta={theta}, e0={e0}, eps={eps}"
        )
    t_max = max(math.log(10.0 * bound_factor * e0 / eps), 1.0) / theta
    return np.linspace(0.0, t_max, _GRID_POINTS)


def simulate_band(
    topology: Topology,
    params: GossipParams,
    initial: NDArray[np.float64],
    t_grid: NDArray[np.float64],
    runs: int,
    seed: int = 0,
) -> Band:
    """Simulate ``runs`` runs and return the 5/50/95% quantiles of the error on ``t_grid``.

    Blocking and CPU-bound: call it through :func:`compute_band`, which runs it in a child.
    This is the one place the dashboard calls the simulator (contract C1).
    """
    from continuized.gossip.sim.simulator import simulate

    # One process: the band is background work and must stay on one core.
    result = simulate(topology, params, initial, t_grid, runs, seed, workers=1)
    return Band(
        t=tuple(float(t) for t in result.t_grid),
        q05=tuple(float(v) for v in result.quantile(0.05)),
        q50=tuple(float(v) for v in result.quantile(0.5)),
        q95=tuple(float(v) for v in result.quantile(0.95)),
        runs=runs,
    )


def simulate_opt_band(
    topology: Topology,
    problems: Any,
    params: Any,
    t_grid: NDArray[np.float64],
    runs: int,
    seed: int = 0,
) -> Band:
    """The band of an optimization run: quantiles of ``sum_v |x_v - x*|^2`` over ``runs`` runs.

    ``problems`` is the network's ``ProblemSet`` and ``params`` its ``DualParams``; the runs
    are those of the optimization simulator (``gossip.dual.simulate.simulate_optimization``,
    the same event streams as the gossip simulator's). Blocking: see :func:`compute_band`.
    """
    from continuized.gossip.dual.simulate import simulate_optimization

    result = simulate_optimization(topology, problems, params, t_grid, runs, seed, workers=1)
    return Band(
        t=tuple(float(t) for t in result.t_grid),
        q05=tuple(float(v) for v in result.quantile(0.05)),
        q50=tuple(float(v) for v in result.quantile(0.5)),
        q95=tuple(float(v) for v in result.quantile(0.95)),
        runs=runs,
    )


async def compute_band(
    topology: Topology,
    params: Any,
    initial: Any,
    t_grid: NDArray[np.float64],
    runs: int,
    seed: int = 0,
    kind: str = "gossip",
) -> Band:
    """Compute the band in a child process and return it, without blocking the event loop.

    Parameters
    ----------
    topology, params, initial, t_grid, runs, seed
        As for ``gossip.sim.simulator.simulate`` (contract C1); for ``kind="optimization"``,
        ``params`` and ``initial`` are the run's ``ProblemSet`` and ``DualParams`` (see
        :func:`simulate_opt_band`).

    The child (:func:`coordinator.machine.offload.offload`) runs at the lowest priority: on a
    2-core machine the band must not steal time from the nodes. Cancelling the call (for example
    under ``asyncio.timeout``) kills it.

    Raises
    ------
    ConfigError
        If the simulation failed in the child (the message carries the child's last error line).
    """
    simulate = simulate_opt_band if kind == "optimization" else simulate_band
    band = await offload(19, simulate, topology, params, initial, t_grid, runs, seed)
    if not isinstance(band, Band):
        raise ConfigError(f"band simulation returned {type(band).__name__}, not a Band")
    return band


class BandKeeper:
    """Start one band computation per live run, as soon as the run's parameters are known.

    Bands are cached by (graph, parameters, initial values, eps), so a run repeated with the
    same settings gets its band at once. :attr:`spawn` (set by the server to its TaskGroup's
    ``create_task``) runs the computation; :attr:`on_ready` is told the run id when it is done.

    Parameters
    ----------
    state : ClusterState
        Read only.
    archive : RunArchive
        The live run's record receives the band and its status.
    max_runs : int
        Most simulated runs (fewer for long horizons, see :data:`BAND_EVENT_BUDGET`); 0: never.
    """

    def __init__(self, state: ClusterState, archive: RunArchive, max_runs: int) -> None:
        self.state = state
        self.archive = archive
        self.max_runs = max_runs
        self.spawn: Callable[[Awaitable[None], str], None] | None = None
        self.on_ready: Callable[[str], None] | None = None
        self._cache: dict[tuple[Any, ...], Band] = {}

    def maybe_start(self) -> None:
        """Start the live run's band if it is due and everything it needs is known."""
        record = self.archive.live
        state = self.state
        if record is not None and state.training is not None:
            # A training run's band is the coordinator's own (its accuracy, loss and consensus,
            # coordinator.figures.train_measure): the runs table shows how that one stands.
            record.band_status = state.training.band_status
            return
        if (
            self.max_runs <= 0
            or self.spawn is None
            or record is None
            or record.band_status != "off"
            or state.topology is None
            or state.params is None
            or len(state.initial) != state.topology.n
            or not record.e0
            or record.theta is None
            or record.bound_factor is None
        ):
            return
        key = (state.graph, state.params, tuple(state.initial), state.eps)
        if state.optimization is not None:
            self._start_optimization(record, (*key, state.optimization.task.problem))
            return
        cached = self._cache.get(key)
        if cached is not None:
            record.band, record.band_status = cached, "ready"
            return
        record.band_status = "pending"
        grid = band_grid(record.theta, record.bound_factor, record.e0, state.eps)
        runs = int(min(self.max_runs, max(8, BAND_EVENT_BUDGET // max(1.0, float(grid[-1])))))
        initial = np.array(state.initial, dtype=np.float64)
        if initial.shape[1] == 1:
            initial = initial[:, 0]
        self.spawn(
            self._compute(record, key, state.topology, state.params, initial, grid, runs),
            f"dashboard-band-{record.run_id}",
        )

    def _start_optimization(self, record: RunRecord, key: tuple[Any, ...]) -> None:
        # An optimization run: the optimization simulator on the coordinator's own copy of the
        # problems (it has them only when it could load the data: else no band, and why).
        tracker, topology = self.state.optimization, self.state.topology
        assert tracker is not None
        assert topology is not None
        assert record.theta
        assert record.e0
        task = tracker.task
        cached = self._cache.get(key)
        if cached is not None:
            record.band, record.band_status = cached, "ready"
            return
        if task.problems is None or task.dual is None:
            record.band_status = f"unavailable: {task.reason or 'no problem set'}"
            return
        record.band_status = "pending"
        grid = band_grid(record.theta, 1.0, record.e0, self.state.eps)
        # An optimization activation costs a few grad f^* evaluations: a tenth of the budget.
        runs = int(min(self.max_runs, max(8, BAND_EVENT_BUDGET // 10 // max(1.0, grid[-1]))))
        self.spawn(  # type: ignore[misc]
            self._compute(
                record, key, topology, task.problems, task.dual, grid, runs, 0, "optimization"
            ),
            f"dashboard-band-{record.run_id}",
        )

    async def _compute(self, record: RunRecord, key: tuple[Any, ...], *args: Any) -> None:
        started = time.monotonic()
        try:
            async with asyncio.timeout(_TIME_LIMIT):
                band = await compute_band(*args)
        except TimeoutError:
            record.band_status = f"unavailable: the simulation took over {_TIME_LIMIT:.0f} s"
            _log.warning("no simulator band for run %s: %s", record.run_id, record.band_status)
            return
        except (GossipError, OSError) as exc:
            record.band_status = f"unavailable: {exc}"
            _log.warning("no simulator band for run %s: %s", record.run_id, exc)
            return
        self._cache[key] = band
        record.band, record.band_status = band, "ready"
        _log.info(
            "simulator band for run %s: %d runs in %.1f s",
            record.run_id,
            band.runs,
            time.monotonic() - started,
        )
        if self.on_ready is not None:
            self.on_ready(record.run_id)
