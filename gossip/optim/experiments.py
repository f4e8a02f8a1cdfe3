"""The paper's optimization experiments as data: curves, quantile bands and convergence slopes.

No drawing and no files here (see :mod:`gossip.optim.figures`); everything is a pure function
of its arguments and seed. Many runs are simulated at once, as one ``(runs, d)`` batch.

Experiments (the paper's appendix "Numerical simulations"):

* comparison: gradient descent, Nesterov and continuized Nesterov from ``x_0 = z_0 = 0`` on the
  convex 100-dimensional and the strongly convex 3-dimensional functions; the continuized
  method once, and over many runs (mean and 5% / 95% quantiles of ``f(x_k) - f*``);
* additive noise: the same with Gaussian noise of covariance ``1e-4 I`` on every gradient,
  started at the optimum, every method over many runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from continuized.gossip.optim._checks import FloatArray, check_count
from continuized.gossip.optim.methods import continuized_nesterov, gradient_descent, nesterov
from continuized.gossip.optim.noise import AdditiveNoise, GradientFn, StochasticGradient
from continuized.gossip.optim.problems import DiagonalQuadratic, paper_convex, paper_strongly_convex

__all__ = [
    "METHODS",
    "Panel",
    "comparison_panels",
    "loglog_slope",
    "noise_panels",
    "semilog_slope",
]

METHODS = ("gradient_descent", "nesterov", "continuized_nesterov")

# Steps per panel: enough for the convex rates to show on a log-log plot, and for the
# strongly convex accelerated methods to gain ~12 orders of magnitude before rounding errors.
CONVEX_STEPS = 1000
STRONGLY_CONVEX_STEPS = 300


@dataclass(frozen=True)
class Panel:
    """One panel of a figure: ``f(x_k) - f*`` against ``k`` for each method.

    Attributes
    ----------
    name : str
        ``"convex"`` or ``"strongly_convex"``.
    k : ndarray, shape (n + 1,)
        Step index (for the continuized method ``E T_k = k``).
    one_run : dict
        Method name to the curve of a single run.
    mean, q05, q95 : dict
        Method name to the mean and 5% / 95% quantiles over ``runs`` runs (random methods only).
    runs : int
        Number of runs behind ``mean``.
    slopes : dict
        Measured and theoretical convergence slopes (see :func:`comparison_panels`).
    """

    name: str
    k: FloatArray
    one_run: dict[str, FloatArray]
    mean: dict[str, FloatArray]
    q05: dict[str, FloatArray]
    q95: dict[str, FloatArray]
    runs: int
    slopes: dict[str, dict[str, float]] = field(default_factory=dict)


def loglog_slope(k: FloatArray, values: FloatArray, k_min: float, k_max: float) -> float:
    """Least-squares slope of ``log f`` against ``log k`` over ``k_min <= k <= k_max``.

    A curve ``f ~ C k^p`` has slope ``p`` (``-2`` for accelerated convex rates).
    """
    sel = (k >= k_min) & (k <= k_max) & (values > 0)
    return float(np.polyfit(np.log(k[sel]), np.log(values[sel]), 1)[0])


def semilog_slope(k: FloatArray, values: FloatArray, k_min: float, k_max: float) -> float:
    """Least-squares slope of ``ln f`` against ``k`` over ``k_min <= k <= k_max``.

    A curve ``f ~ C exp(-r k)`` has slope ``-r`` (``-sqrt(mu / L)`` for continuized Nesterov).
    """
    sel = (k >= k_min) & (k <= k_max) & (values > 0)
    return float(np.polyfit(k[sel], np.log(values[sel]), 1)[0])


def _run(
    method: str,
    problem: DiagonalQuadratic,
    grad: GradientFn | StochasticGradient,
    x0: FloatArray,
    mu: float,
    n_steps: int,
    runs: int | None,
    seed: int,
) -> FloatArray:
    """Return ``f(x_k)`` of one method: shape ``(n + 1,)``, or ``(runs, n + 1)`` for a batch."""
    f, L = problem.f, problem.L
    if method == "gradient_descent":
        res = gradient_descent(grad, x0, L, n_steps, seed, f=f, runs=runs, keep_iterates=False)
    elif method == "nesterov":
        res = nesterov(grad, x0, L, mu, n_steps, seed, f=f, runs=runs, keep_iterates=False)
    else:
        res = continuized_nesterov(
            grad, x0, L, mu, n_steps, seed, f=f, runs=runs, keep_iterates=False
        )
    return res.history["f"]


def _problems() -> list[tuple[str, DiagonalQuadratic, float, int]]:
    convex = paper_convex()
    strong = paper_strongly_convex()
    # The convex function is run with the convex parameters (mu = 0): its strong convexity,
    # 1e-4, is negligible at these horizons, as in the paper.
    return [
        ("convex", convex, 0.0, CONVEX_STEPS),
        ("strongly_convex", strong, strong.mu, STRONGLY_CONVEX_STEPS),
    ]


def _band(curves: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    q05, q95 = np.quantile(curves, [0.05, 0.95], axis=0)
    return curves.mean(axis=0), q05, q95


def comparison_panels(runs: int = 1000, seed: int = 0) -> list[Panel]:
    """Compute the comparison figure: GD, Nesterov, continuized Nesterov from ``x_0 = z_0 = 0``.

    Slopes (``slopes[method]``, fitted over ``k`` in ``[n/10, n]``): on the convex panel the
    exponent ``p`` of ``f ~ k^p`` (``measured``) against the guarantee's (``theory``: ``-1``
    for GD, ``-2`` for both accelerated methods); on the strongly convex panel the rate per
    step of ``ln f`` against the guarantees ``ln(1 - mu/L)``, ``ln(1 - sqrt(mu/L))`` and
    ``-sqrt(mu/L)``. The continuized slope is measured on the mean over the runs.
    """
    runs = check_count("runs", runs, 1)
    panels = []
    for name, problem, mu, n in _problems():
        k = np.arange(n + 1, dtype=np.float64)
        x0 = np.zeros(problem.dim)
        one: dict[str, FloatArray] = {}
        for method in ("gradient_descent", "nesterov"):
            one[method] = _run(method, problem, problem.grad, x0, mu, n, None, seed)
        batch = _run("continuized_nesterov", problem, problem.grad, x0, mu, n, runs, seed)
        one["continuized_nesterov"] = _run(
            "continuized_nesterov", problem, problem.grad, x0, mu, n, None, seed + 1
        )
        mean, q05, q95 = _band(batch)
        panel = Panel(
            name,
            k,
            one,
            {"continuized_nesterov": mean},
            {"continuized_nesterov": q05},
            {"continuized_nesterov": q95},
            runs,
        )
        curves = {**one, "continuized_nesterov": mean}
        if name == "convex":
            theory = {"gradient_descent": -1.0, "nesterov": -2.0, "continuized_nesterov": -2.0}
            fit = loglog_slope
        else:
            ratio = problem.mu / problem.L
            theory = {
                "gradient_descent": math.log(1.0 - ratio),
                "nesterov": math.log(1.0 - math.sqrt(ratio)),
                "continuized_nesterov": -math.sqrt(ratio),
            }
            fit = semilog_slope
        for method, curve in curves.items():
            panel.slopes[method] = {
                "measured": fit(k, curve, n / 10, n),
                "theory": theory[method],
            }
        panels.append(panel)
    return panels


def noise_panels(runs: int = 100, seed: int = 0, variance: float = 1e-4) -> list[Panel]:
    """Compute the additive-noise figure: all methods from ``x*``, noise ``N(0, variance I)``.

    Slopes: on the convex panel the exponent of the growth of the mean ``f ~ k^p`` over
    ``[n/10, n]`` (``theory``: ``1`` for continuized Nesterov, whose guarantee adds
    ``sigma^2 t / (3L)``), with the mean at ``k = n`` (``final``) against that bound
    (``bound``). On the strongly convex panel the plateau, the mean of ``f`` over the last half
    (``plateau``), against the guarantee's ``sigma^2 / sqrt(mu L)`` (``bound``). Here
    ``sigma^2 = variance d``.
    """
    runs = check_count("runs", runs, 1)
    panels = []
    for name, problem, mu, n in _problems():
        k = np.arange(n + 1, dtype=np.float64)
        oracle = AdditiveNoise(problem.grad, variance)
        sigma2 = oracle.variance(problem.dim)
        one: dict[str, FloatArray] = {}
        mean: dict[str, FloatArray] = {}
        q05: dict[str, FloatArray] = {}
        q95: dict[str, FloatArray] = {}
        slopes: dict[str, dict[str, float]] = {}
        for offset, method in enumerate(METHODS):
            batch = _run(method, problem, oracle, problem.x_star, mu, n, runs, seed + offset)
            one[method] = batch[0]
            mean[method], q05[method], q95[method] = _band(batch)
            if name == "convex":
                slopes[method] = {
                    "measured": loglog_slope(k, mean[method], n / 10, n),
                    "final": float(mean[method][-1]),
                }
            else:
                slopes[method] = {"plateau": float(mean[method][n // 2 :].mean())}
        cont = slopes["continuized_nesterov"]
        if name == "convex":
            cont["theory"] = 1.0
            cont["bound"] = sigma2 * n / (3.0 * problem.L)
        else:
            cont["bound"] = sigma2 / math.sqrt(mu * problem.L)
        panels.append(Panel(name, k, one, mean, q05, q95, runs, slopes))
    return panels
