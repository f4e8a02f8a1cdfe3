"""Each node's private objective ``f_v`` (quadratic, ridge, logistic, user-defined).

See :mod:`gossip.problems.base` for the interface and :mod:`gossip.problems.specs` for the
specs.
"""

from continuized.gossip.problems.base import FloatArray, ListProblemSet, LocalProblem, ProblemSet
from continuized.gossip.problems.logistic import DEFAULT_TOL, Logistic, LogisticSet
from continuized.gossip.problems.quadratic import Quadratic, QuadraticSet
from continuized.gossip.problems.ridge import Ridge, RidgeSet
from continuized.gossip.problems.specs import PROBLEM_KINDS, make_local_problem, make_problem_set

__all__ = [
    "DEFAULT_TOL",
    "PROBLEM_KINDS",
    "FloatArray",
    "ListProblemSet",
    "LocalProblem",
    "Logistic",
    "LogisticSet",
    "ProblemSet",
    "Quadratic",
    "QuadraticSet",
    "Ridge",
    "RidgeSet",
    "make_local_problem",
    "make_problem_set",
]
