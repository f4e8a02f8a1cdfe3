"""Closed-form integration of the local mixing ODE of accelerated gossip.

Between two activations every node mixes its own pair of values, with no communication::

    dx = eta (z - x) dt,    dz = eta (x - z) dt.

The half-sum ``a = (x + z) / 2`` is constant and the half-difference ``d = (x - z) / 2`` decays as
``exp(-2 eta tau)``, so the flow over an interval of length ``tau`` (in units of t, not seconds)
is exact::

    x <- a + d exp(-2 eta tau),    z <- a - d exp(-2 eta tau).

The flow is linear and the same at every node. That is what lets a jump computed at time T be
applied later, at time t, by mixing the jump itself over ``t - T`` (see :mod:`gossip.model.jumps`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["decay", "decay_value", "mix", "mix_convex", "mix_values"]

FloatArray = NDArray[np.float64]

Values: TypeAlias = "Sequence[float] | NDArray[np.float64] | NDArray[np.float32]"
"""One node's value: a few plain floats (gossip) or a float64 array (a model's parameters)."""


def decay(eta: float, tau: ArrayLike) -> FloatArray:
    """Return the contraction factor ``exp(-2 eta tau)`` of the half-difference ``(x - z) / 2``.

    Parameters
    ----------
    eta : float
        Mixing rate, ``>= 0`` (``0`` means no mixing, as in plain randomized gossip).
    tau : array_like
        Elapsed time(s) in units of t. Negative values run the flow backwards, which is exact
        too (the flow is invertible).

    Examples
    --------
    >>> float(decay(0.5, 1.0))  # exp(-1)
    0.36787944117144233
    """
    return np.exp(-2.0 * eta * np.asarray(tau, dtype=np.float64))


def decay_value(eta: float, tau: float) -> float:
    """Return :func:`decay` for one float ``tau``: ``exp(-2 eta tau)``, ``inf`` on overflow.

    The scalar fast path of the live nodes, where numpy's per-call overhead would dominate.

    Examples
    --------
    >>> decay_value(0.5, 1.0)  # exp(-1)
    0.36787944117144233
    """
    try:
        return math.exp(-2.0 * eta * tau)
    except OverflowError:
        return math.inf


def mix_values(x: Values, z: Values, eta: float, tau: float) -> tuple[Values, Values]:
    """Return :func:`mix` of one node's value, given and returned as lists of floats.

    ``x <- a + d exp(-2 eta tau)``, ``z <- a - d exp(-2 eta tau)`` with ``a = (x + z) / 2`` and
    ``d = (x - z) / 2``; ``tau`` in units of t. Same arithmetic as :func:`mix`, without numpy;
    a value given as an array (a model's parameters) is mixed as one, with numpy.

    Examples
    --------
    >>> x, z = mix_values([1.0], [0.0], eta=0.25, tau=2.0)
    >>> round(x[0], 6), round(z[0], 6)
    (0.68394, 0.31606)
    """
    factor = decay_value(eta, tau)
    if isinstance(x, np.ndarray) or isinstance(z, np.ndarray):
        xa, za = np.asarray(x, dtype=np.float64), np.asarray(z, dtype=np.float64)
        half_sum_a = 0.5 * (xa + za)
        half_diff_a = (0.5 * factor) * (xa - za)
        return half_sum_a + half_diff_a, half_sum_a - half_diff_a
    new_x, new_z = [], []
    for xi, zi in zip(x, z, strict=True):
        half_sum = 0.5 * (xi + zi)
        half_diff = 0.5 * (xi - zi) * factor
        new_x.append(half_sum + half_diff)
        new_z.append(half_sum - half_diff)
    return new_x, new_z


def mix(x: ArrayLike, z: ArrayLike, eta: float, tau: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Integrate the mixing ODE exactly over ``tau`` and return the new ``(x, z)``.

    ``x`` and ``z`` may be scalars, vectors (one node's d-dimensional value) or whole arrays of
    nodes and runs; ``tau`` broadcasts against them, so one call mixes many nodes at once, each
    over its own interval.

    Parameters
    ----------
    x, z : array_like
        Values at the start of the interval.
    eta : float
        Mixing rate (``theta_ARG`` for accelerated gossip).
    tau : array_like
        Length(s) of the interval in units of t. Must broadcast against ``x``.

    Returns
    -------
    (x, z) : tuple of ndarray
        Values at the end of the interval. ``x + z`` is unchanged (mass is conserved).

    Examples
    --------
    >>> x, z = mix(1.0, 0.0, eta=0.25, tau=2.0)
    >>> round(float(x), 6), round(float(z), 6)
    (0.68394, 0.31606)
    """
    x_arr = np.asarray(x, dtype=np.float64)
    z_arr = np.asarray(z, dtype=np.float64)
    half_sum = 0.5 * (x_arr + z_arr)
    half_diff = 0.5 * (x_arr - z_arr) * decay(eta, tau)
    return half_sum + half_diff, half_sum - half_diff


def mix_convex(
    x: ArrayLike, z: ArrayLike, t_from: ArrayLike, t_to: ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """Integrate the convex-case mixing ODE of continuized Nesterov exactly from t_from to t_to.

    In the convex case (the paper's Section 5) the mixing rate decays with time and only ``x``
    moves::

        dx = (2 / t) (z - x) dt,    dz = 0.

    The ODE is time-inhomogeneous, so the flow depends on both ends of the interval, not only
    on its length. Its exact solution is::

        x(t_to) = z + (t_from / t_to)^2 (x - z),    z(t_to) = z,

    i.e. ``x`` moves towards ``z`` by ``tau = 1 - (t_from / t_to)^2``, the weight ``tau_k`` of the
    discrete recursion. Times are in units of t (expected number of gradient steps), with
    ``0 <= t_from <= t_to``; from ``t_from = 0`` the pair is fully mixed (``x = z``), and an
    empty interval (``t_to == t_from``, including ``0 -> 0``) leaves it unchanged.

    Parameters
    ----------
    x, z : array_like
        Values at time ``t_from``.
    t_from, t_to : array_like
        Start and end times of the interval(s), in units of t; broadcast against ``x``.

    Returns
    -------
    (x, z) : tuple of ndarray
        Values at time ``t_to``.

    Examples
    --------
    >>> x, z = mix_convex(1.0, 0.0, t_from=1.0, t_to=2.0)
    >>> float(x), float(z)
    (0.25, 0.0)
    """
    x_arr = np.asarray(x, dtype=np.float64)
    z_arr = np.asarray(z, dtype=np.float64)
    start = np.asarray(t_from, dtype=np.float64)
    end = np.asarray(t_to, dtype=np.float64)
    # An empty interval (0 -> 0 included) must be the identity, not 0 / 0.
    ratio = np.divide(start, end, out=np.ones(np.broadcast(start, end).shape), where=end != start)
    kept = ratio * ratio
    return z_arr + kept * (x_arr - z_arr), z_arr + np.zeros_like(kept)
