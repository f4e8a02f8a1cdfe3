"""The result of an optimizer run: the final iterate and the history of the run."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from continuized.gossip.errors import ConfigError
from continuized.gossip.model.mixing import mix, mix_convex
from continuized.gossip.optim._checks import FloatArray

__all__ = ["OptimResult"]


@dataclass(frozen=True)
class OptimResult:
    """Final iterates and history of one run (or a batch of runs) of a first-order method.

    Attributes
    ----------
    method : str
        ``"gradient_descent"``, ``"nesterov"`` or ``"continuized_nesterov"``.
    x : ndarray
        Final iterate ``x_n``: shape ``(d,)``, or ``(runs, d)`` for a batch.
    z : ndarray or None
        Final second sequence ``z_n`` (None for gradient descent).
    history : dict of str to ndarray
        ``"T"``: the times of the iterates, ``T_0 = 0 < T_1 < ... < T_n`` in units of t for the
        continuized method (the jump times), ``k`` itself for the discrete methods; shape
        ``(n + 1,)`` or ``(runs, n + 1)``.
        ``"x"``, ``"z"``: the iterates ``x_k``, ``z_k`` (``k = 0..n``), shape ``(n + 1, d)`` or
        ``(runs, n + 1, d)``; present unless the run was asked not to keep them.
        ``"f"``: ``f(x_k)``, shape ``(n + 1,)`` or ``(runs, n + 1)``, when ``f`` was given.
    params : dict of str to float
        The constants the run used (``L``, ``mu``, ``kappa_tilde``, ...).
    """

    method: str
    x: FloatArray
    z: FloatArray | None
    history: dict[str, FloatArray] = field(repr=False)
    params: dict[str, float]

    def at(self, t: float) -> tuple[FloatArray, FloatArray]:
        """Return ``(x_t, z_t)``, the continuized process at time ``t`` (units of t), exactly.

        Between jumps the process only mixes, so with ``T_k <= t < T_{k+1}`` the state is
        ``(x_k, z_k)`` mixed from ``T_k`` to ``t`` by the same closed form as the run. This is
        what the continuous-time guarantees are about, e.g.
        ``E f(x_t) - f* <= 2 L |z_0 - x*|^2 / t^2`` in the convex case.

        Parameters
        ----------
        t : float
            A time ``0 <= t < T_n`` (before every run's last jump: after it, the next jump
            time is unknown).

        Returns
        -------
        (x_t, z_t) : tuple of ndarray
            Shape ``(d,)``, or ``(runs, d)`` for a batch.

        Raises
        ------
        ConfigError
            For a discrete method, a run without kept iterates, or ``t`` out of range.
        """
        if self.method != "continuized_nesterov":
            raise ConfigError(f"at(t) needs a continuized_nesterov run, not {self.method}")
        if "x" not in self.history:
            raise ConfigError("at(t) needs the iterates: run with keep_iterates=True")
        times = self.history["T"]
        t, t_max = float(t), float(np.min(times[..., -1]))
        if not math.isfinite(t) or t < 0 or t >= t_max:
            raise ConfigError(
                f"t must be in [0, {t_max:.6g}) (before the last jump of every run), "
                f"got {t!r}; run more steps to reach it"
            )
        # Index of the last jump at or before t, per run.
        k = np.sum(times <= t, axis=-1, keepdims=True) - 1
        T_k = np.take_along_axis(times, k, axis=-1)
        x_k = np.take_along_axis(self.history["x"], k[..., None], axis=-2)[..., 0, :]
        z_k = np.take_along_axis(self.history["z"], k[..., None], axis=-2)[..., 0, :]
        L, mu, kt = self.params["L"], self.params["mu"], self.params["kappa_tilde"]
        if mu > 0:
            return mix(x_k, z_k, math.sqrt(mu / (L * kt)), t - T_k)
        return mix_convex(x_k, z_k, T_k, np.full_like(T_k, t))
