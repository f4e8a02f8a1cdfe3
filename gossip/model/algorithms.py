"""Algorithm parameters (mixing rate, coupling, guaranteed rate) from the graph quantities.

=========  =====================================  ==========================  ====================
algorithm  mixing rate ``eta``                    coupling ``c``               rate ``theta``
=========  =====================================  ==========================  ====================
RG         0 (no mixing)                          0                           mu_gossip / 2
ARG        sqrt(mu_gossip / (2 R_max))            1 / sqrt(2 mu_gossip R_max)  sqrt(mu / (2 R_max))
=========  =====================================  ==========================  ====================

``theta`` is the rate of the guaranteed bound on the expected error. For RG it is
``mu_gossip / 2``, not the ``theta_RG = mu_gossip`` that the paper quotes (up to constants) from
Boyd et al.: an activation of {v, w} lowers ``sum_v (x_v - mean)^2`` by ``(x_v - x_w)^2 / 2``,
so in expectation by ``x^T L_P x / 2 >= (mu_gossip / 2) |x - mean|^2`` per unit of t, with
equality on the complete graph (where the simulated mean follows ``e0 exp(-mu t / 2)`` exactly and
would cross a bound at rate ``mu``).

The ARG mixing rate is the corrected one (the paper's Section 6 misprints it): the paper's Section 6
prints ``sqrt(2 mu / R_max)``, twice this value, and with it the process diverges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from continuized.gossip.errors import ConfigError

__all__ = [
    "AVERAGING",
    "OPTIMIZING",
    "Algorithm",
    "GossipParams",
    "check_algorithm",
    "gossip_params",
    "parse_algorithm",
]


class Algorithm(StrEnum):
    """The gossip algorithms: randomized gossip (baseline) and accelerated randomized gossip."""

    RG = "rg"
    ARG = "arg"


@dataclass(frozen=True, slots=True)
class GossipParams:
    """Everything a node needs to run one algorithm: ``eta`` (mixing), ``c`` (coupling), ``theta``.

    ``theta`` is the guaranteed exponential rate, in units of t: the expected error
    ``sum_v 1/2 |x_v(t) - mean|^2`` is at most ``2 e0 exp(-theta t)`` for ARG and
    ``e0 exp(-theta t)`` for RG, with ``e0`` its initial value.
    """

    algorithm: Algorithm
    eta: float
    c: float
    theta: float

    @property
    def bound_factor(self) -> float:
        """The constant in front of the theorem's bound: 2 for ARG, 1 for RG."""
        return 2.0 if self.algorithm is Algorithm.ARG else 1.0


def parse_algorithm(name: str) -> Algorithm:
    """Return the :class:`Algorithm` called ``name`` (case-insensitive), or raise ConfigError."""
    try:
        return Algorithm(name.strip().lower())
    except ValueError:
        valid = ", ".join(a.value for a in Algorithm)
        raise ConfigError(f"unknown algorithm {name!r}; valid: {valid}") from None


# Which algorithm runs which task, and where: the one rule every command applies (gossip
# simulate, up, coordinator, node and optimize). Averaging (no --problem) is randomized gossip or
# its acceleration; optimization (--problem) is dual coordinate descent (gossip.dual), of which a
# live node runs only the accelerated pair, and the simulator also the plain one and primal DGD.
AVERAGING = ("arg", "rg")
OPTIMIZING = ("acd", "cd", "dgd")
_VALID: dict[tuple[bool, bool], tuple[str, ...]] = {
    # (optimization, live cluster): the algorithms it runs, the default first
    (False, False): AVERAGING,
    (False, True): AVERAGING,
    (True, False): OPTIMIZING,
    (True, True): ("acd",),
}


def check_algorithm(name: str, *, problem: bool, live: bool) -> str:
    """Return ``name`` (lower-case) if it can run this task here; ``""`` gives the default.

    Parameters
    ----------
    name : str
        The ``--algorithm`` given, or ``""`` for the task's default (``arg``, or ``acd`` for an
        optimization).
    problem : bool
        An optimization run (``--problem``) rather than averaging.
    live : bool
        A live cluster (``gossip up``, ``coordinator``, ``node``) rather than the simulator.

    Raises
    ------
    ConfigError
        An algorithm this task cannot run, with the valid ones: an algorithm is refused, never
        swapped for another.

    Examples
    --------
    >>> check_algorithm("", problem=True, live=True)
    'acd'
    >>> check_algorithm("RG", problem=False, live=True)
    'rg'
    """
    valid = _VALID[(problem, live)]
    key = name.strip().lower()
    if not key:
        return valid[0]
    if key in valid:
        return key
    task = "an optimization (--problem)" if problem else "an averaging run (no --problem)"
    where = "in a live cluster" if live else "in the simulator"
    if key in AVERAGING:
        why = f": {key} averages values (gossip simulate, or gossip up without --problem)"
    elif key in OPTIMIZING and not problem:
        why = f": {key} minimizes a function (gossip optimize, or gossip up --problem)"
    elif key in OPTIMIZING:
        why = f": {key} runs only in the simulator (gossip optimize)"
    else:
        raise ConfigError(
            f"unknown algorithm {name!r}; valid for {task} {where}: {', '.join(valid)}"
        )
    raise ConfigError(
        f"--algorithm {name!r} cannot run {task} {where}{why}; valid: {', '.join(valid)}"
    )


def gossip_params(algorithm: Algorithm | str, mu_gossip: float, r_max: float) -> GossipParams:
    """Return the parameters of ``algorithm`` from the graph quantities ``mu_gossip`` and ``R_max``.

    Examples
    --------
    >>> p = gossip_params("arg", mu_gossip=3.778e-4, r_max=29.0)   # line of 30 nodes
    >>> round(p.eta, 6), round(p.c, 3)
    (0.002552, 6.755)
    """
    algo = algorithm if isinstance(algorithm, Algorithm) else parse_algorithm(algorithm)
    if not (math.isfinite(mu_gossip) and mu_gossip > 0):
        raise ConfigError(f"mu_gossip must be finite and > 0, got {mu_gossip!r}")
    if not (math.isfinite(r_max) and r_max > 0):
        raise ConfigError(f"R_max must be finite and > 0, got {r_max!r}")
    if algo is Algorithm.RG:
        # The guaranteed rate of plain gossip is mu / 2 (see the module docstring).
        return GossipParams(algo, eta=0.0, c=0.0, theta=0.5 * mu_gossip)
    theta = math.sqrt(mu_gossip / (2.0 * r_max))
    return GossipParams(algo, eta=theta, c=1.0 / math.sqrt(2.0 * mu_gossip * r_max), theta=theta)
