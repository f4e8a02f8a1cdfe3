"""Continuized Nesterov acceleration as a library optimizer, its baselines and the paper's figures.

The continuized method (paper sections 3-5) takes gradient steps at the jump
times of a rate-1 Poisson process and mixes its two sequences through an ODE in between; it is
run exactly, as a discrete recursion with random parameters, using the gossip core's closed-form
mixing (:mod:`gossip.model.mixing`), the same functions accelerated gossip uses.

* :mod:`gossip.optim.methods` -- gradient descent, Nesterov, continuized Nesterov
* :mod:`gossip.optim.noise` -- stochastic gradient oracles (additive, pure multiplicative)
* :mod:`gossip.optim.least_squares` -- R^2 and kappa~ of least squares; a noiseless regression
* :mod:`gossip.optim.problems` -- the paper's test functions
* :mod:`gossip.optim.figures` -- the paper's figures (``gossip reproduce optim-figure``)

Examples
--------
>>> import numpy as np
>>> from continuized.gossip.optim import continuized_nesterov
>>> res = continuized_nesterov(lambda x: x, np.ones(3), L=1.0, mu=1e-2, n_steps=100, seed=0)
>>> res.history["T"].shape, res.history["x"].shape
((101,), (101, 3))
"""

from continuized.gossip.optim.least_squares import (
    LeastSquares,
    NoiseConstants,
    noise_constants,
    noiseless_regression,
)
from continuized.gossip.optim.methods import (
    continuized_nesterov,
    gradient_descent,
    nesterov,
    nesterov_sequence,
)
from continuized.gossip.optim.noise import AdditiveNoise, CoordinateSampling, StochasticGradient
from continuized.gossip.optim.problems import DiagonalQuadratic, paper_convex, paper_strongly_convex
from continuized.gossip.optim.result import OptimResult

__all__ = [
    "AdditiveNoise",
    "CoordinateSampling",
    "DiagonalQuadratic",
    "LeastSquares",
    "NoiseConstants",
    "OptimResult",
    "StochasticGradient",
    "continuized_nesterov",
    "gradient_descent",
    "nesterov",
    "nesterov_sequence",
    "noise_constants",
    "noiseless_regression",
    "paper_convex",
    "paper_strongly_convex",
]
