"""Decentralized optimization over randomized gossip: dual (accelerated) coordinate descent.

Node v holds a private, mu-strongly convex and L-smooth ``f_v``; the nodes minimise
``sum_v f_v`` with pairwise exchanges on the Poisson clocks of the gossip model (the paper's Section
7).

* :mod:`gossip.dual.params` -- the parameters, re-derived, with their rates
* :mod:`gossip.dual.steps` -- one activation of acd, cd and the primal baseline dgd (pure)
* :mod:`gossip.dual.engine` -- the lock-step sweep of a block of runs
* :mod:`gossip.dual.simulate` -- many exact, seeded runs on the gossip simulator's event streams
* :mod:`gossip.dual.result` -- their curves and the theorem's bound
"""

from continuized.gossip.dual.params import (
    DualAlgorithm,
    DualParams,
    dual_params,
    parse_dual_algorithm,
)
from continuized.gossip.dual.result import OptimizationResult, bound_constant, t_eps
from continuized.gossip.dual.simulate import simulate_optimization
from continuized.gossip.dual.steps import dgd_average, dgd_step

__all__ = [
    "DualAlgorithm",
    "DualParams",
    "OptimizationResult",
    "bound_constant",
    "dgd_average",
    "dgd_step",
    "dual_params",
    "parse_dual_algorithm",
    "simulate_optimization",
    "t_eps",
]
