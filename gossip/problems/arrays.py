"""A problem set's ``grad f_v^*`` and ``grad f_v`` as plain arrays, for the compiled sweep.

The compiled sweep (:mod:`gossip.dual.compiled`) cannot call a :class:`~gossip.problems.base.
ProblemSet`'s methods: numba compiles functions of arrays and scalars, not Python objects. A
built-in family says here how its conjugate gradient is computed from arrays alone:

* :class:`AffineConjugate`: ``grad f_v^*(y) = M_v (y + c_v)``, quadratic (``M_v = I``) and
  ridge (``M_v = H_v^-1``);
* :class:`NewtonConjugate`: logistic, solved by the live node's own compiled Newton
  (:mod:`gossip.problems.newton_kernel`), whose answers meet the batched solver's guarantee
  ``|grad f_v(x) - y| <= tol``.

and how its gradient is, for the primal baseline dgd:

* :class:`AffineGradient`: ``grad f_v(x) = H_v x - c_v``, quadratic (``H_v = I``) and ridge;
* :class:`NewtonConjugate` again: logistic's rows give ``grad f_v`` too (the residual of the
  Newton kernel at ``y = 0``).

A problem set without such a form (user-defined problems) returns None from
:meth:`~gossip.problems.base.ProblemSet.conjugate_arrays` and
:meth:`~gossip.problems.base.ProblemSet.gradient_arrays`, and is swept by the numpy engine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

# The same alias as gossip.problems.base's, restated: base imports this module's classes for
# its signatures, and an import back would make the two modules a circle.
FloatArray = NDArray[np.float64]

__all__ = [
    "AffineConjugate",
    "AffineGradient",
    "ConjugateArrays",
    "GradientArrays",
    "NewtonConjugate",
    "affine",
    "affine_gradient",
]


@dataclass(frozen=True, eq=False)
class AffineConjugate:
    """``grad f_v^*(y) = M_v (y + c_v)``; ``matrix`` (n, d, d) is None when every ``M_v = I``."""

    offset: FloatArray
    matrix: FloatArray | None = None


@dataclass(frozen=True, eq=False)
class NewtonConjugate:
    """Logistic ``grad f_v^*`` by Newton on node v's rows (padded with zero rows, which add
    nothing to the gradient or the Hessian).

    ``As`` (n, rows, d): row i of node v is ``s_i a_i``; ``norms`` (n, rows): ``|a_i| PHI3 /
    (2 m_v)``; ``inv_m`` (n,): ``1 / m_v``; ``max_steps``: Newton steps before giving up,
    ``max_halvings``: a line search's halvings.
    """

    As: FloatArray
    norms: FloatArray
    inv_m: FloatArray
    lam: float
    tol: float
    max_steps: int
    max_halvings: int


@dataclass(frozen=True, eq=False)
class AffineGradient:
    """``grad f_v(x) = H_v x - c_v``; ``matrix`` (n, d, d) is None when every ``H_v = I``."""

    offset: FloatArray
    matrix: FloatArray | None = None


ConjugateArrays = AffineConjugate | NewtonConjugate
GradientArrays = AffineGradient | NewtonConjugate


def affine(offset: FloatArray, matrix: FloatArray | None = None) -> AffineConjugate:
    """An :class:`AffineConjugate` with C-contiguous float64 arrays (what the kernel takes)."""
    return AffineConjugate(
        np.ascontiguousarray(offset, dtype=np.float64),
        None if matrix is None else np.ascontiguousarray(matrix, dtype=np.float64),
    )


def affine_gradient(offset: FloatArray, matrix: FloatArray | None = None) -> AffineGradient:
    """An :class:`AffineGradient` with C-contiguous float64 arrays (what the kernel takes)."""
    return AffineGradient(
        np.ascontiguousarray(offset, dtype=np.float64),
        None if matrix is None else np.ascontiguousarray(matrix, dtype=np.float64),
    )
