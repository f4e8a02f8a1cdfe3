"""Arrays handed out for frames, reused once nothing else holds them.

A model's exchange sends ``x`` and ``z`` (the request) or ``dx`` and ``dz`` (the reply) as
raw parts that ZeroMQ reads from the arrays themselves, after the call that built them has
returned, and that the exchange keeps for a re-send. So those arrays must be new, or at least
unshared. A fresh array of a million parameters costs more than its arithmetic: the
allocator returns the pages of a freed 8 MB block to the system, and the next one faults
them in again (about 1700 page faults per array, measured).

:class:`ArrayPool` keeps the arrays it has handed out and hands one out again only when its
reference count shows that nothing else holds it: no frame, no socket (ZeroMQ's zero-copy
send holds a reference until it has sent the bytes), no caller, no view (a numpy view holds
its base). The rule: **an array from :meth:`ArrayPool.take` is the caller's for as long as it
keeps a reference to it**, exactly as a new array would be.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from numpy.typing import DTypeLike, NDArray

from continuized.gossip.errors import ConfigError

__all__ = ["ArrayPool"]


def _unshared_count() -> int:
    """The reference count, seen inside :meth:`ArrayPool.take`'s loop, of a kept array that
    nothing else holds (3 on CPython 3.11: the list's, the loop variable's, the argument's).
    Measured rather than assumed: interpreters differ in the references a loop takes."""
    kept = [np.empty(1)]
    for array in kept:
        return sys.getrefcount(array)
    raise AssertionError("unreachable")


_UNSHARED = _unshared_count()


class ArrayPool:
    """A few arrays of one shape and dtype, handed out when unshared (see the module).

    Parameters
    ----------
    dim : int
        The arrays' length.
    dtype : dtype
        Their dtype.
    keep : int
        At most this many arrays are kept; past that, :meth:`take` returns new ones.

    Examples
    --------
    >>> pool = ArrayPool(3, np.float64)
    >>> a = pool.take()
    >>> first = id(a)
    >>> b = pool.take()      # a is still held: another array
    >>> a is b
    False
    >>> del a
    >>> id(pool.take()) == first   # b is held; the first one is free again
    True
    """

    def __init__(self, dim: int, dtype: DTypeLike, keep: int = 6):
        if dim < 0 or keep < 0:
            raise ConfigError(f"an array pool needs dim >= 0 and keep >= 0, got {dim!r}, {keep!r}")
        self.dim = int(dim)
        self.dtype = np.dtype(dtype)
        self._keep = int(keep)
        self._kept: list[NDArray[Any]] = []

    def take(self) -> NDArray[Any]:
        """Return an array of ``dim`` values (contents undefined) that nothing else holds."""
        for array in self._kept:
            if sys.getrefcount(array) <= _UNSHARED:
                array.flags.writeable = True  # a holder may have made it read-only
                return array
        array = np.empty(self.dim, dtype=self.dtype)
        if len(self._kept) < self._keep:
            self._kept.append(array)
        return array

    @property
    def kept(self) -> int:
        """How many arrays the pool keeps (for tests and memory accounting)."""
        return len(self._kept)
