"""Statistics over runs of a many-run result: its ``errors`` array, one row per run."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError

__all__ = ["ErrorsOverRuns"]

FloatArray = NDArray[np.float64]


class ErrorsOverRuns:
    """Mean, quantiles and median of ``errors`` (shape ``(runs, len(t_grid))``) over runs.

    A base of the simulators' result classes (gossip's and the optimizer's), which hold
    ``errors``.
    """

    errors: FloatArray

    @property
    def runs(self) -> int:
        """Number of runs."""
        return int(self.errors.shape[0])

    def mean(self) -> FloatArray:
        """Mean error over runs, per grid point."""
        return np.asarray(self.errors.mean(axis=0), dtype=np.float64)

    def quantile(self, q: float) -> FloatArray:
        """The ``q``-quantile (0 <= q <= 1) of the error over runs, per grid point."""
        if not 0.0 <= q <= 1.0:
            raise ConfigError(f"quantile must be in [0, 1], got {q!r}")
        return np.asarray(np.quantile(self.errors, q, axis=0), dtype=np.float64)

    def median(self) -> FloatArray:
        """Median error over runs, per grid point."""
        return self.quantile(0.5)
