"""The result of an optimizer run: the final iterate and the history of the run."""

from __future__ import annotations

from dataclasses import dataclass, field

from gossip.optim._checks import FloatArray

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
