"""When a run has reached eps, and at which t: the rule the coordinator stops on (pure).

The rule
--------
    While the run has an exact curve (:mod:`coordinator.figures.exact_curve`: the network's state at
    the grid times every node has passed), eps is reached when ``confirm`` of its points in a
    row are ``<= eps``; ``t_eps`` is the curve's first point ``<= eps`` (its first crossing,
    as the simulator's runs measure it: the first grid time below eps), and ``wall_s =
    t_eps / rate``, the seconds from the epoch at which the clocks passed it.

    Without one (nodes that send no trace, a run whose members changed, an optimization run
    the coordinator cannot measure exactly), the estimate's rule decides
    (:class:`coordinator.run.evaluation.EpsRule`) and ``t_eps`` is unknown.

    Either way the estimate's own confirmed crossing is kept apart, as ``t_eps_estimate``.

Why the exact curve: the estimate mixes reports of different times forward without the jumps
between, and sits above the true error by more as the rate grows (:mod:`gossip.exchange.trace`); at
5,000/s on line:30 it crossed 1e-6 about 1.5 to 2 times later than the run itself did, and the
run went on for seconds after it had converged. Why confirm: ARG's error is not monotone, so
one point below eps does not stop the run; ``confirm`` points in a row span ``confirm - 1``
grid steps, a few report periods at the most. A grid time that could never complete (a lost
report) is simply absent from the curve: the points in a row are the curve's, not the grid's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from continuized.coordinator.figures.records import ErrorPoint
from continuized.coordinator.run.evaluation import CONFIRM, EpsRule, Evaluation
from continuized.gossip.errors import ConfigError

__all__ = ["Convergence", "ExactRule"]


class ExactRule:
    """Confirm eps on the exact curve (the rule of the module docstring).

    Parameters
    ----------
    eps : float
        The target error (> 0).
    confirm : int
        Points in a row at or below ``eps`` (>= 1).

    Examples
    --------
    >>> rule = ExactRule(1.0, confirm=2)
    >>> [rule.observe(ErrorPoint(t, e, 0.0, 0.0)) for t, e in [(0, 2), (1, 0.5), (2, 3)]]
    [None, None, None]
    >>> rule.observe(ErrorPoint(3, 0.5, 0.0, 0.0)), rule.observe(ErrorPoint(4, 0.9, 0.0, 0.0)).t
    (None, 1)
    """

    def __init__(self, eps: float, confirm: int = CONFIRM) -> None:
        if not (math.isfinite(eps) and eps > 0):
            raise ConfigError(f"eps must be a positive finite number, got {eps!r}")
        if confirm < 1:
            raise ConfigError(f"confirm must be >= 1, got {confirm!r}")
        self.eps = eps
        self.confirm = confirm
        self.first: ErrorPoint | None = None  # the curve's first point <= eps
        self._count = 0  # points <= eps in a row, up to the latest

    def observe(self, point: ErrorPoint) -> ErrorPoint | None:
        """Take the curve's next point (in order of t); return its first crossing once eps is
        confirmed (now or before), else ``None``."""
        if not point.error <= self.eps:  # ``not <=``: a NaN breaks the row too
            self._count = 0
            return None
        if self.first is None:
            self.first = point
        self._count += 1
        return self.first if self._count >= self.confirm else None


class Convergence:
    """Decide eps for one run from its exact curve and its estimates (the module's rule).

    Parameters
    ----------
    eps : float
        The target error (> 0).
    rate : float
        Activations per second (``t = rate * seconds``): gives ``wall_s``.
    confirm : int
        Points in a row at or below ``eps``, for both rules.

    Attributes
    ----------
    crossing : ErrorPoint or None
        The exact curve's first point ``<= eps``, once eps is confirmed on the curve.
    estimate : ErrorPoint or None
        The first of the estimates that confirmed eps
        (:class:`~coordinator.run.evaluation.EpsRule`).
    """

    def __init__(self, eps: float, rate: float, confirm: int = CONFIRM) -> None:
        if not (math.isfinite(rate) and rate > 0):
            raise ConfigError(f"rate must be a positive finite number, got {rate!r}")
        self.eps, self.rate, self.confirm = eps, rate, confirm
        self._exact = ExactRule(eps, confirm)
        self._estimates = EpsRule(eps, confirm)
        self.crossing: ErrorPoint | None = None
        self.estimate: ErrorPoint | None = None

    def add_exact(self, points: Iterable[ErrorPoint]) -> None:
        """Take the exact curve's new points, in order of t."""
        for point in points:
            hit = self._exact.observe(point)
            if hit is not None and self.crossing is None:
                self.crossing = hit

    def add_estimate(self, ev: Evaluation, not_before: float = -math.inf) -> None:
        """Take the next estimate (``not_before``: the membership view's start, as for
        :meth:`coordinator.run.evaluation.EpsRule.observe`)."""
        hit = self._estimates.observe(ev, not_before)
        if hit is not None and self.estimate is None:
            self.estimate = hit

    def reached(self, exact: bool) -> bool:
        """Whether eps is reached; ``exact``: whether the run has an exact curve (then only
        the curve decides)."""
        return self.crossing is not None if exact else self.estimate is not None

    def t_eps(self, exact: bool) -> float | None:
        """The exact first crossing of eps (``None``: not reached, or no exact curve)."""
        return self.crossing.t if exact and self.crossing is not None else None

    def wall_s(self, exact: bool) -> float | None:
        """Seconds from the epoch to :meth:`t_eps` (``t_eps / rate``)."""
        t = self.t_eps(exact)
        return None if t is None else t / self.rate

    def restart(self) -> None:
        """Forget everything: the members changed, so the mean to reach did too."""
        self._exact = ExactRule(self.eps, self.confirm)
        self._estimates = EpsRule(self.eps, self.confirm)
        self.crossing = self.estimate = None
