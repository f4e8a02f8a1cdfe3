"""Each node's private objective ``f_v`` (quadratic, ridge, logistic, user-defined).

See :mod:`gossip.problems.base` for the interface.
"""

from gossip.problems.base import FloatArray, ListProblemSet, LocalProblem, ProblemSet

__all__ = ["FloatArray", "ListProblemSet", "LocalProblem", "ProblemSet"]
