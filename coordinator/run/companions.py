"""What runs beside a run, in the coordinator's process: the dashboard and the training band.

Neither decides anything: :func:`serve_dashboard` shows the run's state, and
:func:`simulate_training_band` computes the simulator's runs of a training run (its band, and
the runs its accuracy is judged among) in a child process while the nodes train.
"""

from __future__ import annotations

import asyncio
import math
import sys

from continuized.coordinator.figures.state import ClusterState
from continuized.coordinator.membership.plan import Plan
from continuized.coordinator.run.config import CoordinatorConfig
from continuized.gossip.errors import ConfigError

__all__ = ["announce_dashboard", "serve_dashboard", "simulate_training_band"]


async def simulate_training_band(
    state: ClusterState, plan: Plan, config: CoordinatorConfig, done: asyncio.Event
) -> None:
    """The simulator's runs of the training run's settings, computed while the nodes train;
    ``done`` is set when they end, either way (the summary's verdict waits for it)."""
    from continuized.coordinator.figures.train_measure import simulate_in_child

    assert state.training is not None
    timeout = config.run_timeout
    try:
        await simulate_in_child(
            state.training,
            # The nodes sample their models once per report period: the live grid's step.
            plan.rate * plan.metrics_period,
            config.training_runs,
            # To the run's timeout at most: simulated t past its end would only cost.
            math.inf if timeout is None else plan.rate * timeout,
        )
    finally:
        done.set()


async def serve_dashboard(state: ClusterState, config: CoordinatorConfig) -> None:
    """Serve the dashboard of ``state`` on ``config``'s host and port until cancelled.

    Raises
    ------
    ConfigError
        The dashboard cannot be imported (its message says what is missing).
    """
    try:
        from continuized.coordinator.dashboard import serve
    except ImportError as exc:
        raise ConfigError(
            f"--dashboard-port needs the dashboard (continuized.coordinator.dashboard): {exc}"
        ) from None
    await serve(
        state,
        config.dashboard_host,
        config.dashboard_port if config.dashboard_port is not None else 8080,
        config.dashboard_token or None,
        runs_dir=config.dashboard_runs_dir,
        on_ready=announce_dashboard,
    )


def announce_dashboard(url: str) -> None:
    """Tell the user where the dashboard listens (on stderr, beside the progress output)."""
    print(f"dashboard: {url}", file=sys.stderr, flush=True)
