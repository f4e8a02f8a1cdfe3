"""Parameters of decentralized optimization over gossip: dual accelerated coordinate descent.

Node v holds a private ``f_v``, mu-strongly convex and L-smooth (mu the smallest, L the largest
over nodes); the nodes minimise ``f = sum_v f_v``. With ``A e_{vw} = sqrt(P_e) (e_v - e_w)``
(so ``A A^T = L_P``, the Laplacian weighted by the edge probabilities), the consensus constraint
``A^T X = 0`` gives the dual problem ``min_lambda h(lambda) = F^*(A lambda)``, solved by
continuized coordinate descent on the edge coordinates, sampled with probabilities ``P_e``.
Multiplying by A turns the edge variables into node variables ``y = A lambda``,
``z = A lambda'`` (both start at 0); ``g_u = grad f_u^*(y_u)`` is node u's primal estimate.

Re-derived constants (the paper's Section 7; the paper's appendix writes ``P_e / (2 mu)`` for the
coordinate smoothness, but ``|A e_e|^2 = 2 P_e``):

* coordinate smoothness ``M_ee <= 2 P_e / mu`` (``F^*`` is ``1/mu``-smooth), projector
  ``Proj = A^+ A`` with ``R_e = Proj_ee = P_e R_eff(e)``;
* ``L_dual = max_e M_ee R_e / P_e^2 = 2 R_max / mu``;
* ``mu_dual = mu_gossip / L``: ``F^*`` is ``1/L``-strongly convex and ``A^T A >= mu_gossip Proj``;
* ``gamma = 1 / L_dual``, ``gamma' = 1 / sqrt(mu_dual L_dual)``, ``eta = sqrt(mu_dual / L_dual)``;
* on activation of e = {v, w}: ``D = g_v - g_w``, ``y_v -= s_e D``, ``y_w += s_e D``,
  ``z_v -= gamma' D``, ``z_w += gamma' D`` with the per-edge step
  ``s_e = gamma R_e / P_e = gamma R_eff(e) <= mu / 2``; between activations every node mixes
  ``(y_v, z_v)`` with the closed form of :mod:`gossip.model.mixing` at rate ``eta``;
* rate ``theta = sqrt(mu_dual / L_dual) = sqrt(mu_gossip / (2 R_max)) / sqrt(L / mu)``:
  ``E sum_v |grad f_v^*(y_v(t)) - x*|^2 <= (2 / mu) Phi_0 exp(-theta t)`` with
  ``Phi_0 = f(x*) - sum_v min f_v + (mu_dual / 2) tr(Y*^T L_P^+ Y*)``, ``Y*_v = grad f_v(x*)``
  (the coordinate-descent theorem's Lyapunov function at t = 0, and ``F^*`` ``1/mu``-smooth).

With ``f_v = |x - b_v|^2 / 2`` (mu = L = 1), ``x_v = y_v + b_v``, ``eta = theta_ARG``,
``gamma' = 1 / sqrt(2 mu_gossip R_max) = c`` and ``s_e = R_eff(e) / (2 R_max)``: where every edge
has the same ``R_eff`` (line, cycle, complete graph) this is ARG, jump for jump.

``cd`` is the same without acceleration (``eta = 0``, no z, same ``s_e``). One activation lowers
``F^*`` by ``s_e (1 - s_e / mu) |D|^2 >= s_e |D|^2 / 2``; with ``H - H* <= (L/2) |Pi g|^2`` and
``g^T L_P g >= mu_gossip |Pi g|^2`` its guaranteed rate is
``theta_cd = mu_gossip R_min / (2 kappa R_max)`` (``R_min`` the smallest ``R_eff``; with plain
quadratics on a line, randomized gossip's ``mu_gossip / 2``), and
``E sum_v |g_v - x*|^2 <= (2 / mu) (f(x*) - sum_v min f_v) exp(-theta_cd t)``.
The coordinate-descent theorem's own non-accelerated rate ``mu_dual / L_dual`` is lower by the
factor ``R_min``; both are printed.

``dgd`` is the primal baseline: decentralized gradient descent on the same Poisson clocks (see
:mod:`gossip.dual.steps`), with a constant step ``alpha``; it has no linear rate to the exact
optimum (a constant step stops in a neighbourhood of x*), so its ``theta`` is 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError

__all__ = ["DualAlgorithm", "DualParams", "dual_params", "parse_dual_algorithm"]

FloatArray = NDArray[np.float64]


class DualAlgorithm(StrEnum):
    """Decentralized optimizers: accelerated and plain dual coordinate descent, primal DGD."""

    ACD = "acd"
    CD = "cd"
    DGD = "dgd"


def parse_dual_algorithm(name: str) -> DualAlgorithm:
    """Return the :class:`DualAlgorithm` called ``name`` (case-insensitive), or raise."""
    try:
        return DualAlgorithm(name.strip().lower())
    except ValueError:
        valid = ", ".join(a.value for a in DualAlgorithm)
        raise ConfigError(f"unknown optimization algorithm {name!r}; valid: {valid}") from None


@dataclass(frozen=True, eq=False)
class DualParams:
    """Every constant one algorithm needs, and where it comes from.

    Attributes
    ----------
    algorithm : DualAlgorithm
    mu_gossip, r_max, r_min : float
        Graph quantities (:mod:`gossip.graph.spectral`).
    mu, L : float
        Strong convexity (min over nodes) and smoothness (max over nodes) of the ``f_v``.
    eta : float
        Mixing rate of ``(y, z)`` between activations (0 for cd and dgd).
    gamma, gamma_prime : float
        ``1 / L_dual`` and the z step ``1 / sqrt(mu_dual L_dual)`` (0 for cd and dgd).
    steps : ndarray (n_edges,)
        Per-edge y step ``s_e = gamma R_eff(e)`` (dual methods; zeros for dgd).
    theta : float
        Guaranteed exponential rate of ``E sum_v |x_v - x*|^2`` in units of t (0 for dgd).
    alpha : float
        DGD's gradient step (0 for the dual methods).
    """

    algorithm: DualAlgorithm
    mu_gossip: float
    r_max: float
    r_min: float
    mu: float
    L: float
    eta: float
    gamma: float
    gamma_prime: float
    theta: float
    alpha: float = 0.0
    steps: FloatArray = field(default_factory=lambda: np.zeros(0), repr=False)

    @property
    def kappa(self) -> float:
        """Condition number bound ``L / mu``."""
        return self.L / self.mu

    @property
    def mu_dual(self) -> float:
        """Strong convexity of the dual on the orthogonal of its kernel: ``mu_gossip / L``."""
        return self.mu_gossip / self.L

    @property
    def L_dual(self) -> float:  # noqa: N802 (the paper's name)
        """Coordinate smoothness constant of the dual: ``2 R_max / mu``."""
        return 2.0 * self.r_max / self.mu

    @property
    def accelerated(self) -> bool:
        """Whether the algorithm keeps and mixes a second variable z."""
        return self.algorithm is DualAlgorithm.ACD

    def as_dict(self) -> dict[str, Any]:
        """Return every scalar parameter as a JSON-ready dict."""
        out: dict[str, Any] = {
            "algorithm": self.algorithm.value,
            "mu_gossip": self.mu_gossip,
            "r_max": self.r_max,
            "r_min": self.r_min,
            "mu": self.mu,
            "L": self.L,
            "kappa": self.kappa,
            "mu_dual": self.mu_dual,
            "L_dual": self.L_dual,
            "gamma": self.gamma,
            "gamma_prime": self.gamma_prime,
            "eta": self.eta,
            "theta": self.theta,
            "theta_cd_theorem": self.mu_dual / self.L_dual,
        }
        if self.algorithm is DualAlgorithm.DGD:
            out["alpha"] = self.alpha
        elif self.steps.size:
            out["step_min"] = float(self.steps.min())
            out["step_max"] = float(self.steps.max())
        return out

    def describe(self) -> str:
        """Return the parameters as one readable line per group."""
        d = self.as_dict()
        lines = [
            f"{self.algorithm.value}: theta={d['theta']:.4g} (rate of E sum_v |x_v - x*|^2 in t)",
            f"  graph: mu_gossip={d['mu_gossip']:.4g} R_max={d['r_max']:.4g} "
            f"R_min={d['r_min']:.4g}",
            f"  problem: mu={d['mu']:.4g} L={d['L']:.4g} kappa={d['kappa']:.4g}",
            f"  dual: mu_dual={d['mu_dual']:.4g} L_dual={d['L_dual']:.4g} gamma={d['gamma']:.4g}",
        ]
        if self.algorithm is DualAlgorithm.DGD:
            lines.append(f"  dgd: alpha={self.alpha:.4g} (constant step; no linear rate to x*)")
        else:
            lines.append(
                f"  steps: s_e=gamma R_eff(e) in [{d.get('step_min', 0):.4g}, "
                f"{d.get('step_max', 0):.4g}]  eta={d['eta']:.4g}  gamma'={d['gamma_prime']:.4g}"
            )
        return "\n".join(lines)


def dual_params(
    algorithm: DualAlgorithm | str,
    mu_gossip: float,
    r_eff: NDArray[np.float64],
    mu: float,
    L: float,
    alpha: float | None = None,
) -> DualParams:
    """Return the parameters of ``algorithm`` (see the module docstring for the derivation).

    Parameters
    ----------
    algorithm : DualAlgorithm or str
        ``acd``, ``cd`` or ``dgd``.
    mu_gossip : float
        Smallest non-zero eigenvalue of ``L_P``.
    r_eff : ndarray (n_edges,)
        Effective resistance of every edge, in edge order (``GraphQuantities.r_eff``).
    mu, L : float
        ``0 < mu <= L``: strong convexity and smoothness bounds of every ``f_v``.
    alpha : float, optional
        DGD's step; default ``1 / L``.

    Examples
    --------
    >>> import numpy as np
    >>> p = dual_params("acd", 3.778e-4, np.full(29, 29.0), mu=1.0, L=1.0)  # line of 30
    >>> round(p.eta, 6), round(p.gamma_prime, 3), float(p.steps[0])
    (0.002552, 6.755, 0.5)
    """
    algo = algorithm if isinstance(algorithm, DualAlgorithm) else parse_dual_algorithm(algorithm)
    if not (math.isfinite(mu_gossip) and mu_gossip > 0):
        raise ConfigError(f"mu_gossip must be finite and > 0, got {mu_gossip!r}")
    resist = np.asarray(r_eff, dtype=np.float64)
    if resist.ndim != 1 or resist.size == 0 or not np.all(np.isfinite(resist) & (resist > 0)):
        raise ConfigError("r_eff must be a non-empty 1-D array of finite values > 0")
    if not (math.isfinite(mu) and math.isfinite(L) and 0 < mu <= L):
        raise ConfigError(f"need 0 < mu <= L, both finite; got mu={mu!r}, L={L!r}")
    r_max, r_min = float(resist.max()), float(resist.min())
    L_dual = 2.0 * r_max / mu
    mu_dual = mu_gossip / L
    gamma = 1.0 / L_dual
    if algo is DualAlgorithm.DGD:
        step = 1.0 / L if alpha is None else alpha
        if not (math.isfinite(step) and step > 0):
            raise ConfigError(f"the DGD step alpha must be finite and > 0, got {alpha!r}")
        eta, gamma_prime, theta = 0.0, 0.0, 0.0
        steps = np.zeros(0)
    elif algo is DualAlgorithm.CD:
        step, eta, gamma_prime = 0.0, 0.0, 0.0
        theta = mu_gossip * r_min / (2.0 * (L / mu) * r_max)
        steps = gamma * resist
    else:
        step, eta = 0.0, math.sqrt(mu_dual / L_dual)
        gamma_prime, theta = 1.0 / math.sqrt(mu_dual * L_dual), eta
        steps = gamma * resist
    return DualParams(
        algorithm=algo,
        mu_gossip=mu_gossip,
        r_max=r_max,
        r_min=r_min,
        mu=mu,
        L=L,
        eta=eta,
        gamma=gamma,
        gamma_prime=gamma_prime,
        theta=theta,
        alpha=step,
        steps=steps,
    )
