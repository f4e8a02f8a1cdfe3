"""Gradient descent, Nesterov acceleration and continuized Nesterov acceleration.

All three iterate the same three-sequence scheme (the paper's section 2)::

    y_k     = x_k + tau_k (z_k - x_k)
    x_{k+1} = y_k - gamma_k grad f(y_k)
    z_{k+1} = z_k + tau'_k (y_k - z_k) - gamma'_k grad f(y_k)

and differ only in their parameters. The continuized method (sections 3-4) takes
its gradient steps at the jump times ``T_1 < T_2 < ...`` of a rate-1 Poisson process and lets
``x`` and ``z`` mix through an ODE in between; the discrete recursion above, with random
``tau_k, tau'_k, gamma'_k``, is that process observed at the jump times, with no discretisation
error. The mixing between jumps is computed by the gossip core's closed forms
(:func:`gossip.model.mixing.mix`, :func:`gossip.model.mixing.mix_convex`), the very functions the
gossip node uses, so the optimizer and accelerated gossip share one implementation.

Every function runs one trajectory, or ``runs`` independent trajectories at once when
``runs`` is given (then ``grad_f`` and ``f`` must act row-wise on ``(runs, d)`` arrays).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from continuized.gossip.errors import ConfigError
from continuized.gossip.model.mixing import mix, mix_convex
from continuized.gossip.optim._checks import (
    FloatArray,
    Seed,
    as_rng,
    check_count,
    check_curvatures,
    check_point,
    check_same_shape,
)
from continuized.gossip.optim.noise import GradientFn, StochasticGradient
from continuized.gossip.optim.result import OptimResult

__all__ = ["continuized_nesterov", "gradient_descent", "nesterov", "nesterov_sequence"]

ObjectiveFn = Callable[[FloatArray], ArrayLike]


class _Run:
    """Set-up, gradient calls and history shared by the three methods."""

    def __init__(
        self,
        grad_f: GradientFn | StochasticGradient,
        f: ObjectiveFn | None,
        x0: ArrayLike,
        z0: ArrayLike | None,
        n_steps: int,
        runs: int | None,
        seed: Seed,
        keep_iterates: bool,
    ) -> None:
        if not callable(grad_f):
            raise ConfigError(f"grad_f must be a callable x -> gradient, got {grad_f!r}")
        if f is not None and not callable(f):
            raise ConfigError(f"f must be None or a callable x -> f(x), got {f!r}")
        self.n_steps = check_count("n_steps", n_steps, 0)
        start = check_point("x0", x0)
        second = start if z0 is None else check_point("z0", z0)
        if second.shape != start.shape:
            raise ConfigError(
                f"z0 has shape {second.shape} but x0 has shape {start.shape}; they must match"
            )
        self.batch: tuple[int, ...] = () if runs is None else (check_count("runs", runs, 1),)
        self.shape = (*self.batch, start.size)
        self.x = np.broadcast_to(start, self.shape).copy()
        self.z = np.broadcast_to(second, self.shape).copy()
        self.rng = as_rng(seed)
        self.grad_f = grad_f
        self.f = f
        self.keep = keep_iterates
        self.times: list[FloatArray] = []
        self.xs: list[FloatArray] = []
        self.zs: list[FloatArray] = []
        self.fs: list[FloatArray] = []

    def grad(self, y: FloatArray, step: int) -> FloatArray:
        if isinstance(self.grad_f, StochasticGradient):
            g = self.grad_f(y, self.rng)
        else:
            g = np.asarray(self.grad_f(y), dtype=np.float64)
        check_same_shape("grad_f", g, y.shape, step)
        return g

    def record(self, T: FloatArray | float, with_z: bool = True) -> None:
        self.times.append(np.broadcast_to(np.asarray(T, dtype=np.float64), self.batch).copy())
        if self.keep:
            self.xs.append(self.x.copy())
            if with_z:
                self.zs.append(self.z.copy())
        if self.f is not None:
            value = np.asarray(self.f(self.x), dtype=np.float64)
            if value.shape != self.batch or not np.isfinite(value).all():
                raise ConfigError(
                    f"f must return one finite value per run (shape {self.batch}), got "
                    f"{value!r} at step {len(self.times) - 1}"
                )
            self.fs.append(value)

    def result(self, method: str, params: dict[str, float], with_z: bool = True) -> OptimResult:
        # Runs go first and steps second, so history["f"][r] is the curve of run r.
        axis = len(self.batch)
        history = {"T": np.stack(self.times, axis=axis)}
        if self.keep:
            history["x"] = np.stack(self.xs, axis=axis)
            if with_z:
                history["z"] = np.stack(self.zs, axis=axis)
        if self.f is not None:
            history["f"] = np.stack(self.fs, axis=axis)
        return OptimResult(method, self.x, self.z if with_z else None, history, params)


def gradient_descent(
    grad_f: GradientFn | StochasticGradient,
    x0: ArrayLike,
    L: float,
    n_steps: int = 1000,
    seed: Seed = None,
    *,
    f: ObjectiveFn | None = None,
    runs: int | None = None,
    keep_iterates: bool = True,
) -> OptimResult:
    """Run gradient descent with step ``1 / L``: ``x_{k+1} = x_k - grad f(x_k) / L``.

    For convex L-smooth ``f``, ``f(x_k) - f* <= L |x_0 - x*|^2 / (2 k)``; for mu-strongly convex
    ``f``, ``f(x_k) - f* <= (1 - mu / L)^k (f(x_0) - f*)``.

    Parameters
    ----------
    grad_f : callable or StochasticGradient
        ``grad_f(x)``, or an oracle ``grad_f(x, rng)`` for stochastic gradients.
    x0 : array_like, shape (d,)
        Starting point.
    L : float
        Smoothness constant (any upper bound of it), ``> 0``.
    n_steps : int
        Number of gradient steps, ``>= 0``.
    f : callable, optional
        Objective, to record ``history["f"]``.
    seed : int or Generator, optional
        Randomness of a stochastic oracle.
    runs : int, optional
        Number of independent runs simulated at once (row-wise ``grad_f`` and ``f``).
    keep_iterates : bool
        Keep ``history["x"]`` (turn off for large batches).

    Returns
    -------
    OptimResult
        ``history["T"]`` is ``k``.

    Examples
    --------
    >>> res = gradient_descent(lambda x: x, [1.0, 2.0], L=2.0, n_steps=3)
    >>> res.x.tolist()
    [0.125, 0.25]
    """
    L, _ = check_curvatures(L, 0.0)
    run = _Run(grad_f, f, x0, None, n_steps, runs, seed, keep_iterates)
    run.record(0.0, with_z=False)
    for k in range(run.n_steps):
        run.x = run.x - run.grad(run.x, k) / L
        run.record(float(k + 1), with_z=False)
    return run.result("gradient_descent", {"L": L}, with_z=False)


def nesterov_sequence(n_steps: int) -> FloatArray:
    """Return ``A_0..A_n`` of Nesterov's convex scheme.

    ``A_0 = 0`` and ``A_{k+1} = A_k + (1 + sqrt(4 A_k + 1)) / 2``.

    ``A_k`` grows like ``k^2 / 4``, which gives the ``O(1 / k^2)`` rate.

    Examples
    --------
    >>> nesterov_sequence(3).round(3).tolist()
    [0.0, 1.0, 2.618, 4.812]
    """
    n = check_count("n_steps", n_steps, 0)
    A = np.zeros(n + 1)
    for k in range(n):
        A[k + 1] = A[k] + 0.5 * (1.0 + math.sqrt(4.0 * A[k] + 1.0))
    return A


def nesterov(
    grad_f: GradientFn | StochasticGradient,
    x0: ArrayLike,
    L: float,
    mu: float = 0.0,
    n_steps: int = 1000,
    seed: Seed = None,
    *,
    f: ObjectiveFn | None = None,
    runs: int | None = None,
    keep_iterates: bool = True,
) -> OptimResult:
    """Run Nesterov's accelerated gradient with the parameters of the paper's Theorem 1.

    Convex (``mu = 0``): ``tau_k = 1 - A_k / A_{k+1}``, ``tau'_k = 0``, ``gamma_k = 1 / L``,
    ``gamma'_k = (A_{k+1} - A_k) / L`` (see :func:`nesterov_sequence`); then
    ``f(x_k) - f* <= 2 L |x_0 - x*|^2 / k^2``.

    Strongly convex (``mu > 0``), with ``q = sqrt(mu / L)``: ``tau = q / (1 + q)``, ``tau' = q``,
    ``gamma = 1 / L``, ``gamma' = 1 / sqrt(mu L)``; then
    ``f(x_k) - f* <= (f(x_0) - f* + mu / 2 |z_0 - x*|^2) (1 - q)^k``.

    Parameters are those of :func:`gradient_descent`, plus ``mu`` (``0 <= mu <= L``), in the
    order of :func:`continuized_nesterov`. ``z_0 = x_0``.

    Examples
    --------
    >>> res = nesterov(lambda x: x, [1.0], L=1.0, n_steps=2, mu=1.0)
    >>> res.x.tolist()  # with mu = L it is Newton's method on a quadratic: one step suffices
    [0.0]
    """
    L, mu = check_curvatures(L, mu)
    run = _Run(grad_f, f, x0, None, n_steps, runs, seed, keep_iterates)
    if mu > 0:
        q = math.sqrt(mu / L)
        taus = np.full(run.n_steps, q / (1.0 + q))
        tau_primes = np.full(run.n_steps, q)
        gamma_primes = np.full(run.n_steps, 1.0 / math.sqrt(mu * L))
    else:
        A = nesterov_sequence(run.n_steps)
        taus = 1.0 - A[:-1] / A[1:]
        tau_primes = np.zeros(run.n_steps)
        gamma_primes = np.diff(A) / L
    run.record(0.0)
    for k in range(run.n_steps):
        y = run.x + taus[k] * (run.z - run.x)
        g = run.grad(y, k)
        run.x = y - g / L
        run.z = run.z + tau_primes[k] * (y - run.z) - gamma_primes[k] * g
        run.record(float(k + 1))
    return run.result("nesterov", {"L": L, "mu": mu})


def continuized_nesterov(
    grad_f: GradientFn | StochasticGradient,
    x0: ArrayLike,
    L: float,
    mu: float = 0.0,
    n_steps: int = 1000,
    seed: Seed = None,
    *,
    f: ObjectiveFn | None = None,
    z0: ArrayLike | None = None,
    kappa_tilde: float = 1.0,
    runs: int | None = None,
    keep_iterates: bool = True,
) -> OptimResult:
    """Run continuized Nesterov acceleration exactly: a discrete recursion with random parameters.

    Gradient steps happen at the jump times ``T_1 < T_2 < ...`` of a rate-1 Poisson process
    (``T_0 = 0``, so ``E T_k = k``); ``x_k, z_k`` are the process at ``T_k`` and
    ``y_k = x_{T_{k+1}-}``::

        y_k     = the pair (x_k, z_k) mixed from T_k to T_{k+1}        (exact ODE solution)
        x_{k+1} = y_k - grad f(y_k) / L
        z_{k+1} = (z mixed from T_k to T_{k+1}) - gamma'_k grad f(y_k)

    Convex (``mu = 0``): mixing ``dx = (2 / t)(z - x) dt, dz = 0``, i.e.
    ``tau_k = 1 - (T_k / T_{k+1})^2``, ``tau'_k = 0``, and ``gamma'_k = T_{k+1} / (2 L kappa~)``
    (the step is taken at ``T_{k+1}``: the theorem's printed ``T_k / (2L)`` is a misprint).
    Guarantee (``kappa~ = 1``): ``E[T_k^2 (f(x_k) - f*)] <= 2 L |z_0 - x*|^2``.

    Strongly convex (``mu > 0``), ``s = sqrt(mu / (L kappa~))``: mixing
    ``dx = s (z - x) dt, dz = s (x - z) dt``, i.e. ``tau_k = (1 - exp(-2 s dT)) / 2``,
    ``tau'_k = tanh(s dT)`` with ``dT = T_{k+1} - T_k``, and ``gamma' = 1 / sqrt(mu L kappa~)``.
    Guarantee (``kappa~ = 1``): ``E[exp(s T_k)(f(x_k) - f*)] <= f(x_0) - f* + mu / 2 |z_0 - x*|^2``.

    ``kappa_tilde = 1`` gives the paper's Theorem 2 (exact gradients, or additive noise, which
    adds ``sigma^2 t / (3L)`` resp. ``sigma^2 / sqrt(mu L)`` to the bounds). For pure
    multiplicative noise (least squares, section 5) pass ``L = R^2`` and the statistical
    condition number ``kappa_tilde`` (:func:`gossip.optim.least_squares.noise_constants`): this
    gives ``gamma = 1/R^2``, ``eta = 1/sqrt(kappa kappa~)``, ``gamma' = sqrt(kappa/kappa~)/R^2``
    with ``kappa = R^2 / mu``, the parameters of the paper's Theorem 4.

    Parameters
    ----------
    grad_f : callable or StochasticGradient
        ``grad_f(x)``, or an oracle ``grad_f(x, rng)`` for stochastic gradients.
    x0 : array_like, shape (d,)
        Starting point ``x_0`` (``z_0 = x_0`` unless ``z0`` is given).
    L : float
        Smoothness constant, ``> 0`` (``R^2`` under multiplicative noise).
    mu : float
        Strong convexity, ``0 <= mu <= L``; ``0`` selects the convex parameters.
    n_steps : int
        Number of gradient steps (jumps), ``>= 0``.
    seed : int or Generator, optional
        Randomness of the jump times (and of a stochastic oracle).
    f : callable, optional
        Objective, to record ``history["f"]``.
    z0 : array_like, optional
        Starting point of the second sequence.
    kappa_tilde : float
        Statistical condition number, ``>= 1`` (``1`` for exact gradients).
    runs : int, optional
        Number of independent runs simulated at once (row-wise ``grad_f`` and ``f``).
    keep_iterates : bool
        Keep ``history["x"]`` and ``history["z"]`` (turn off for large batches).

    Returns
    -------
    OptimResult
        ``history["T"]`` holds the jump times ``T_0 = 0, T_1, ..., T_n`` (units of t).

    Examples
    --------
    >>> res = continuized_nesterov(lambda x: x - 1.0, [0.0, 0.0], L=1.0, mu=0.5, n_steps=50, seed=0)
    >>> bool(np.allclose(res.x, 1.0)), res.history["T"].shape
    (True, (51,))
    """
    L, mu = check_curvatures(L, mu)
    try:
        kt = float(kappa_tilde)
    except (TypeError, ValueError):
        raise ConfigError(f"kappa_tilde must be a real number >= 1, got {kappa_tilde!r}") from None
    if not (math.isfinite(kt) and kt >= 1.0):
        raise ConfigError(
            f"kappa_tilde must be a finite number >= 1 (1 for exact gradients), got {kappa_tilde!r}"
        )
    run = _Run(grad_f, f, x0, z0, n_steps, runs, seed, keep_iterates)
    # The jump times are drawn first, so they depend on the seed only, not on the oracle.
    gaps = run.rng.exponential(1.0, size=(run.n_steps, *run.batch))
    T = np.zeros(run.batch)
    run.record(T)
    if mu > 0:
        s = math.sqrt(mu / (L * kt))
        gamma_prime = 1.0 / math.sqrt(mu * L * kt)
    for k in range(run.n_steps):
        T_next = T + gaps[k]
        if mu > 0:
            # tau_k and tau'_k are exactly the gossip mixing flow with eta = s over dT.
            y, z_mixed = mix(run.x, run.z, s, gaps[k][..., None])
            g = run.grad(y, k)
            run.z = z_mixed - gamma_prime * g
        else:
            y, z_mixed = mix_convex(run.x, run.z, T[..., None], T_next[..., None])
            g = run.grad(y, k)
            run.z = z_mixed - (T_next / (2.0 * L * kt))[..., None] * g
        run.x = y - g / L
        T = T_next
        run.record(T)
    return run.result("continuized_nesterov", {"L": L, "mu": mu, "kappa_tilde": kt})
