"""What both backends of :mod:`gossip.model.arithmetic` know of floats: the array types they
take, and where a value stored in float32 stops being finite."""

from __future__ import annotations

import math
import sys

import numpy as np
from numpy.typing import NDArray

__all__ = ["F64", "FLOAT32_MAX", "LARGEST", "Floats", "stored_below"]

F64 = NDArray[np.float64]
"""A float64 array: a ledger's rows and running sums, and every scratch array."""
Floats = NDArray[np.floating]
"""A float64 or float32 array: the ``x``, ``z`` and flows a model's frames carry."""

LARGEST = sys.float_info.max
"""float64's largest finite value."""
FLOAT32_MAX = float(np.finfo(np.float32).max)
"""float32's largest finite value."""
_FLOAT32_BELOW = 2.0**128 - 2.0**103  # halfway between float32's largest and 2**128


def stored_below(dtype: np.dtype) -> float:
    """The float64 magnitude from which a value stored in ``dtype`` is no longer finite:
    float32 rounds ``2**128 - 2**103`` and above to infinity (to nearest, ties to even), and
    float64 keeps every finite value.

    Examples
    --------
    >>> bound = stored_below(np.dtype(np.float32))
    >>> bool(np.isfinite(np.float32(np.nextafter(bound, 0.0)))), stored_below(np.dtype(np.float64))
    (True, inf)
    """
    return _FLOAT32_BELOW if dtype == np.float32 else math.inf
