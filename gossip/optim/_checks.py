"""Argument checks and the one seed helper shared by the optimizers.

Every check raises :class:`~gossip.errors.ConfigError` with a message that names the bad value
and says what would be valid, so a caller never gets a numpy traceback for a wrong argument.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from continuized.gossip.errors import ConfigError

__all__ = [
    "FloatArray",
    "Seed",
    "as_rng",
    "check_count",
    "check_curvatures",
    "check_point",
    "check_same_shape",
]

FloatArray = NDArray[np.float64]
Seed = int | np.random.Generator | None


def as_rng(seed: Seed) -> np.random.Generator:
    """Normalise ``seed`` (None, an int >= 0, or a Generator) into a numpy Generator."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        return np.random.default_rng()
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ConfigError(f"seed must be None, an int >= 0 or a numpy Generator, got {seed!r}")
    return np.random.default_rng(int(seed))


def check_count(name: str, value: Any, minimum: int) -> int:
    """Return ``value`` as an int, or raise if it is not an integer ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_curvatures(L: Any, mu: Any) -> tuple[float, float]:
    """Check the smoothness ``L`` and strong convexity ``mu``: ``L > 0`` and ``0 <= mu <= L``."""
    try:
        L_f, mu_f = float(L), float(mu)
    except (TypeError, ValueError):
        raise ConfigError(f"L and mu must be real numbers, got L={L!r}, mu={mu!r}") from None
    if not (math.isfinite(L_f) and L_f > 0):
        raise ConfigError(f"L (smoothness) must be a finite number > 0, got {L!r}")
    if not (math.isfinite(mu_f) and mu_f >= 0):
        raise ConfigError(f"mu (strong convexity) must be a finite number >= 0, got {mu!r}")
    if mu_f > L_f:
        raise ConfigError(
            f"mu must be <= L (f cannot be more convex than smooth), got mu={mu!r} > L={L!r}"
        )
    return L_f, mu_f


def check_point(name: str, value: ArrayLike) -> FloatArray:
    """Return ``value`` as a finite 1-D float64 array (a point of R^d), or raise."""
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a 1-D array of real numbers, got {value!r}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ConfigError(
            f"{name} must be a non-empty 1-D array (a point of R^d), got shape {arr.shape}"
        )
    if not np.isfinite(arr).all():
        raise ConfigError(f"{name} must be finite, got {arr!r}")
    return arr


def check_same_shape(name: str, value: FloatArray, expected: tuple[int, ...], step: int) -> None:
    """Raise if a callable returned ``value`` of a wrong shape, or not finite, at ``step``."""
    if value.shape != expected:
        raise ConfigError(
            f"{name} returned an array of shape {value.shape} at step {step}; "
            f"expected {expected}, the shape of its input"
        )
    if not np.isfinite(value).all():
        raise ConfigError(
            f"{name} returned non-finite values at step {step} (the iterates may have diverged: "
            "is L at least the smoothness constant of f?)"
        )
