"""The A²CiD² constants ``eta`` and ``alpha~`` of a graph and a communication rate.

Each node communicates at ``rate_com`` per unit of t (one unit = one expected gradient step per
node), spread over the edges in proportion to the topology's ``P_e``, as gossip does: edge ``e``
fires at ``lambda_e = P_e * n * rate_com / 2`` (on a regular graph, ``rate_com / deg``). The
communication Laplacian ``L = sum_e lambda_e (e_i - e_j)(e_i - e_j)^T`` is then ``n r / 2``
times the gossip Laplacian ``L_P`` of :mod:`gossip.graph.spectral`, so its quantities come from
:func:`gossip.graph.spectral.graph_quantities` with no new eigen-solve::

    chi1 = 1 / lambda2(L)                                  = 2 / (n r mu_gossip)
    chi2 = max_e 1/2 (e_i - e_j)^T L^+ (e_i - e_j)         = R_max / (n r)
    eta = 1 / (2 sqrt(chi1 chi2)),    alpha~ = sqrt(chi1 / chi2) / 2.

These are Proposition 3.6 of Nabli, Belilovsky and Oyallon (NeurIPS 2023), and equal the values
of the authors' code on the graphs it supports (cycle:64 at rate 1: ``eta = 0.0350``,
``alpha~ = 7.262``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.spectral import GraphQuantities, graph_quantities
from continuized.gossip.graph.topology import Topology

__all__ = ["AcidConstants", "acid_constants"]


@dataclass(frozen=True)
class AcidConstants:
    """``chi1``, ``chi2`` of the communication Laplacian and the A²CiD² ``eta``, ``alpha_tilde``.

    ``edge_rate_total`` is the whole graph's communication rate ``n r / 2`` per unit of t.
    """

    rate_com: float
    chi1: float
    chi2: float
    eta: float
    alpha_tilde: float
    edge_rate_total: float

    def as_dict(self) -> dict[str, float]:
        """Return the constants as a JSON-ready dict."""
        return {
            "rate_com": self.rate_com,
            "chi1": self.chi1,
            "chi2": self.chi2,
            "eta": self.eta,
            "alpha_tilde": self.alpha_tilde,
            "edge_rate_total": self.edge_rate_total,
        }


def acid_constants(
    topology: Topology, rate_com: float, quantities: GraphQuantities | None = None
) -> AcidConstants:
    """Return the A²CiD² constants of ``topology`` when every node communicates at ``rate_com``.

    Parameters
    ----------
    topology : Topology
        The graph and its edge probabilities ``P_e`` (how a node's communications spread).
    rate_com : float
        Communications per node per unit of t (per expected gradient step), ``> 0``.
    quantities : GraphQuantities, optional
        ``graph_quantities(topology)`` if already computed.

    Examples
    --------
    >>> from continuized.gossip.graph.topology import parse_topology
    >>> c = acid_constants(parse_topology("cycle:32"), 1.0)
    >>> round(c.chi1, 2), round(c.chi2, 4), round(c.eta, 4), round(c.alpha_tilde, 3)
    (52.04, 0.9688, 0.0704, 3.665)
    """
    if not (math.isfinite(rate_com) and rate_com > 0):
        raise ConfigError(f"the communication rate must be a finite number > 0, got {rate_com!r}")
    q = quantities if quantities is not None else graph_quantities(topology)
    total = topology.n * rate_com / 2.0
    chi1 = 1.0 / (total * q.mu_gossip)
    chi2 = 0.5 * q.r_max / total
    return AcidConstants(
        rate_com=rate_com,
        chi1=chi1,
        chi2=chi2,
        eta=0.5 / math.sqrt(chi1 * chi2),
        alpha_tilde=0.5 * math.sqrt(chi1 / chi2),
        edge_rate_total=total,
    )
