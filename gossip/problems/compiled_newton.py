"""The live logistic node's compiled solver: loading it, and the object that calls it.

:func:`compiled_solver` imports :mod:`gossip.problems.newton_kernel` (and numba with it)
once, and makes numba compile it or load it from its cache on a throwaway 1 x 1 problem, so
that no live exchange pays for that. It returns None where numba cannot be imported, or where
``GOSSIP_SOLVER=numpy`` turns it off: :class:`gossip.problems.logistic.Logistic` then uses its
numpy path, with the same steps and the same guarantee. Why the answer is compiled, and how it
is computed: :mod:`gossip.problems.newton_kernel`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import numpy as np

from continuized.gossip.problems.base import FloatArray

__all__ = ["CompiledNewton", "compiled_solver"]

_kernel: list[Callable[..., int] | None] = []  # loaded once: [kernel or None]
_kernel_lock = threading.Lock()


def compiled_solver() -> Callable[..., int] | None:
    """The compiled answer (:func:`gossip.problems.newton_kernel.newton_answer`), or None.

    None if numba cannot be imported, or ``GOSSIP_SOLVER=numpy`` turns it off. The first
    call imports numba and compiles the kernel or loads it from numba's cache (about half a
    second with the cache, a few seconds without); a fork server calls it once so that its
    children do not.
    """
    if os.environ.get("GOSSIP_SOLVER", "").strip().lower() == "numpy":
        return None
    with _kernel_lock:
        if not _kernel:
            try:
                from continuized.gossip.problems.newton_kernel import newton_answer
            except ImportError:
                _kernel.append(None)
            else:
                _first_answer(newton_answer)
                _kernel.append(newton_answer)
    return _kernel[0]


def _first_answer(kernel: Callable[..., int]) -> None:
    """Call ``kernel`` once on a 1 x 1 problem: numba compiles (or loads from its cache) on a
    first call, and this one, not a live exchange's, should pay for it."""
    one = np.ones(1)
    kernel(
        np.ones((1, 1)), one, 1.0, 1.0, 1e-10, one * 0.5, one * 0.0, np.ones((1, 1)), one, False, 5
    )


class CompiledNewton:
    """One shard's ``grad f^*`` as one compiled call per answer (:mod:`.newton_kernel`).

    ``phi3`` is the bound of the logistic loss's third derivative and ``max_steps`` the most
    Newton steps before giving up, as in :class:`gossip.problems.logistic._LocalNewton`.
    """

    def __init__(
        self,
        kernel: Callable[..., int],
        A: FloatArray,
        s: FloatArray,
        lam: float,
        tol: float,
        phi3: float,
        max_steps: int,
    ) -> None:
        self._kernel = kernel
        self.As = np.ascontiguousarray(A * s[:, None])  # row i: s_i a_i
        self.norms = np.ascontiguousarray(np.sqrt((A * A).sum(axis=1)) * (phi3 / (2 * len(A))))
        self.lam, self.tol, self.inv_m = float(lam), float(tol), 1.0 / len(A)
        self.max_steps = int(max_steps)
        self._chol = np.zeros((A.shape[1], A.shape[1]))  # the last Hessian's factor
        self._y = np.zeros(A.shape[1])  # the y of the last answer
        self._warm = False  # whether _chol and _y belong to the last answer
        self.newton_steps = 0  # counted for the benchmark

    def forget(self) -> None:
        """Drop the kept factor: the next answer starts from the last one, uncorrected."""
        self._warm = False

    def solve(self, y: FloatArray, x0: FloatArray) -> FloatArray | None:
        """``grad f^*(y)`` from ``x0`` (the last answer), or None if Newton stalled.

        ``y`` must be a C-contiguous float64 vector of the shard's width: the kernel does not
        check its bounds (:meth:`gossip.problems.logistic.Logistic.grad_conjugate` does).
        """
        x = np.array(x0, dtype=np.float64)  # a copy: the kernel works in place
        steps = self._kernel(
            self.As,
            self.norms,
            self.lam,
            self.inv_m,
            self.tol,
            y,
            x,
            self._chol,
            self._y,
            self._warm,
            self.max_steps,
        )
        # The factor is the last Newton step's: an answer that took none (its start was
        # already within tol) keeps the one before, which a failed call may have spoiled.
        self._warm = steps > 0 or (steps == 0 and self._warm)
        if steps < 0:
            return None
        self.newton_steps += steps
        return x
