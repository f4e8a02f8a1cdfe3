"""Problems from a short spec: ``quadratic``, ``ridge:L``, ``logistic:L``, ``module:callable``.

=====================  ==========================================================================
``quadratic``          ``f_v = 1/2 |x - b_v|^2``, ``b_v`` the node's value vector (no data)
``ridge:LAMBDA``       ``1/(2 m_v) |A_v x - b_v|^2 + LAMBDA/2 |x|^2`` on the node's shard
``logistic:LAMBDA``    L2-regularised logistic regression on the node's shard, ``LAMBDA > 0``
``module:callable``    user-defined: ``callable(shard, node)`` returns a :class:`LocalProblem`
=====================  ==========================================================================

A user-defined factory is imported by name (``package.module:function``), the module found
in the working directory first, as ``python -m`` would (:mod:`gossip.datasets.user_code`), and
called once per node with that node's
:class:`~gossip.datasets.Shard` (``None`` without data) and the node id; see
``examples/huber_problem.py``. Its problems are checked against the :class:`LocalProblem`
protocol and served through :class:`ListProblemSet` (a Python loop per batch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from continuized.gossip.datasets.shard import Shard
from continuized.gossip.datasets.user_code import load_callable
from continuized.gossip.errors import ConfigError
from continuized.gossip.problems.base import ListProblemSet, LocalProblem, ProblemSet
from continuized.gossip.problems.logistic import DEFAULT_TOL, Logistic, LogisticSet
from continuized.gossip.problems.quadratic import Quadratic, QuadraticSet
from continuized.gossip.problems.ridge import Ridge, RidgeSet

__all__ = ["PROBLEM_KINDS", "check_targets", "make_local_problem", "make_problem_set"]

PROBLEM_KINDS = ("quadratic", "ridge:LAMBDA", "logistic:LAMBDA", "module:callable")
_VALID = "valid problems: " + ", ".join(PROBLEM_KINDS)

Factory = Callable[[Shard | None, int], LocalProblem]


def _parse(spec: str) -> tuple[str, str]:
    kind, sep, arg = spec.strip().partition(":")
    low = kind.lower()
    if low == "quadratic" and not sep:
        return "quadratic", ""
    if low in ("ridge", "logistic"):
        try:
            lam = float(arg)
        except ValueError:
            raise ConfigError(
                f"problem {spec!r}: LAMBDA must be a number, e.g. {low}:0.1; {_VALID}"
            ) from None
        if not np.isfinite(lam) or lam < 0:
            raise ConfigError(f"problem {spec!r}: LAMBDA must be finite and >= 0, got {arg}")
        return low, arg
    dotted = kind.split(".") + arg.split(".")
    if sep and kind and arg and all(p.isidentifier() for p in dotted):
        return "custom", spec.strip()
    raise ConfigError(f"unknown problem {spec!r}; {_VALID}")


def _factory(spec: str) -> Factory:
    factory: Factory = load_callable(spec, "problem", others=_VALID)
    return factory


def _custom(factory: Factory, spec: str, shard: Shard | None, node: int) -> LocalProblem:
    problem = factory(shard, node)
    if not isinstance(problem, LocalProblem):
        raise ConfigError(
            f"problem {spec!r}: the factory returned {type(problem).__name__}, which lacks "
            "dim, mu, L, value, grad or grad_conjugate "
            "(see continuized.gossip.problems.LocalProblem)"
        )
    return problem


def _need(shards: object, spec: str) -> None:
    if shards is None:
        raise ConfigError(
            f"problem {spec!r} needs data: give a data set (e.g. breast-cancer); "
            "only quadratic (and user-defined problems) run without"
        )


def make_problem_set(
    spec: str,
    shards: Sequence[Shard] | None,
    *,
    n: int | None = None,
    values: ArrayLike | None = None,
    tol: float = DEFAULT_TOL,
) -> ProblemSet:
    """The ``n`` nodes' problems of ``spec``, one per shard.

    Parameters
    ----------
    spec : str
        A problem spec (module docstring).
    shards : sequence of Shard, or None
        One per node; None for ``quadratic`` (and user-defined problems without data).
    n : int, optional
        Number of nodes when there are no shards.
    values : array (n, d), optional
        ``quadratic`` only: the centres ``b_v``; default node 0 holds 1, the others 0 (``d = 1``,
        the paper's one-hot setting), so ``x* = 1/n``.
    tol : float
        ``logistic`` only: Newton's stopping residual (:mod:`gossip.problems.logistic`).

    Examples
    --------
    >>> make_problem_set("quadratic", None, n=4).x_star().tolist()
    [0.25]
    """
    kind, arg = _parse(spec)
    if shards is not None:
        shards = list(shards)
        if not shards:
            raise ConfigError(f"problem {spec!r}: got 0 shards; need one per node (n >= 1)")
        if n is not None and n != len(shards):
            raise ConfigError(f"problem {spec!r}: n = {n} but {len(shards)} shards were given")
        for s in shards:
            if s.dim != shards[0].dim:
                raise ConfigError(
                    f"problem {spec!r}: {s.name} has {s.dim} features, the first shard "
                    f"{shards[0].dim}; every shard must have the same width"
                )
    if kind == "quadratic":
        if shards is not None:
            raise ConfigError("problem 'quadratic' takes no data; give values instead of shards")
        if values is None:
            if n is None or n < 1:
                raise ConfigError(f"problem 'quadratic': need n >= 1 nodes, got n = {n}")
            centres = np.zeros((n, 1))
            centres[0] = 1.0
            return QuadraticSet(centres)
        problems = QuadraticSet(values)
        if n is not None and n != problems.n:
            raise ConfigError(f"problem 'quadratic': n = {n} but values has {problems.n} rows")
        return problems
    if kind == "ridge":
        _need(shards, spec)
        assert shards is not None
        return RidgeSet(shards, float(arg))
    if kind == "logistic":
        _need(shards, spec)
        assert shards is not None
        return LogisticSet(shards, float(arg), tol)
    factory = _factory(arg)
    if shards is None:
        if n is None or n < 1:
            raise ConfigError(f"problem {spec!r} without data: need n >= 1 nodes, got n = {n}")
        return ListProblemSet([_custom(factory, spec, None, v) for v in range(n)])
    return ListProblemSet([_custom(factory, spec, s, v) for v, s in enumerate(shards)])


def make_local_problem(
    spec: str,
    shard: Shard | None,
    *,
    node: int = 0,
    value: ArrayLike | None = None,
    tol: float = DEFAULT_TOL,
) -> LocalProblem:
    """One node's problem from its own shard only (what a live node builds).

    ``value`` is the ``quadratic`` centre ``b_v``; ``node`` is passed to user-defined factories.
    """
    kind, arg = _parse(spec)
    if kind == "quadratic":
        if value is None:
            raise ConfigError("problem 'quadratic': a node needs its value vector b_v (value=)")
        return Quadratic(value)
    if kind == "ridge":
        _need(shard, spec)
        assert shard is not None
        return Ridge(shard, float(arg))
    if kind == "logistic":
        _need(shard, spec)
        assert shard is not None
        return Logistic(shard, float(arg), tol)
    return _custom(_factory(arg), spec, shard, node)


def check_targets(spec: str, data: str, targets: ArrayLike) -> None:
    """Refuse a data set whose targets ``problem`` cannot use, before any work starts.

    ``logistic`` needs two classes: targets in ``{-1, +1}`` or in ``{0, 1}``, both present.
    The one data set of real-valued targets it takes is ``synthetic:``, whose Gaussian targets
    it cuts at zero by design (:mod:`gossip.problems.logistic`); they must fall on both sides.
    Other problems take any finite targets.

    Raises
    ------
    ConfigError
        ``logistic`` on other targets, e.g. ``diabetes``'s real numbers: the message says what
        the data has and what to use instead.

    Examples
    --------
    >>> check_targets("logistic:0.1", "breast-cancer", [0.0, 1.0, 1.0])
    >>> check_targets("logistic:0.1", "diabetes", [151.0, 75.0, 141.0])
    Traceback (most recent call last):
    ...
    continuized.gossip.errors.ConfigError: problem 'logistic:0.1' needs two classes ...
    """
    if _parse(spec)[0] != "logistic":
        return
    b = np.asarray(targets, dtype=np.float64).ravel()
    values = np.unique(b)
    two = {-1.0, 1.0} if values.min(initial=0.0) < 0 else {0.0, 1.0}
    if set(values.tolist()) == two:
        return
    synthetic = data.strip().lower().startswith("synthetic")
    if synthetic and (b > 0).any() and (b <= 0).any():
        return
    if values.size < 2:
        has = f"one target value, {values[0]:g}" if values.size else "no rows"
    elif values.size == 2:
        has = f"two target values, {values[0]:g} and {values[1]:g}"
    else:
        whole = bool(np.all(values == np.round(values)))
        has = (
            f"{values.size} distinct {'integer' if whole else 'real-valued'} targets from "
            f"{values[0]:g} to {values[-1]:g}"
        )
    raise ConfigError(
        f"problem {spec!r} needs two classes (targets -1/+1 or 0/1), but data set {data!r} has "
        f"{has}; use a two-class data set such as breast-cancer, or ridge:LAMBDA for "
        "real-valued targets"
    )
