"""Graph quantities of a topology: mu_gossip, effective resistances, R_max and the rates.

With ``L_P`` the Laplacian weighted by the edge probabilities ``P_e``:

* ``mu_gossip`` is the smallest non-zero eigenvalue of ``L_P``;
* ``R_eff(v, w) = (e_v - e_w)^T L_P^+ (e_v - e_w)`` and ``R_max`` is its maximum over edges;
* ``theta_RG = mu_gossip`` and ``theta_ARG = sqrt(mu_gossip / (2 R_max))``.

Two exact paths compute them:

* ``dense`` (default up to :data:`DENSE_LIMIT` nodes): one symmetric eigendecomposition gives the
  spectrum and the pseudo-inverse at once.
* ``sparse``: ``mu_gossip`` by shift-invert Lanczos (``scipy.sparse.linalg.eigsh``) and every
  ``R_eff`` by Laplacian solves against one sparse LU factorisation of the grounded Laplacian
  (node 0 removed, which makes it positive definite), in blocks of right-hand sides. No
  approximation is involved: the results agree with the dense path to solver precision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg
from numpy.typing import NDArray

from gossip.errors import ConfigError
from gossip.topology import Topology

__all__ = ["DENSE_LIMIT", "GraphQuantities", "graph_quantities", "laplacian"]

DENSE_LIMIT = 1500
"""Largest node count for which ``method="auto"`` takes the dense path."""

_BLOCK = 256  # right-hand sides per sparse solve: bounds memory to n * 256 floats


@dataclass(frozen=True, eq=False)
class GraphQuantities:
    """The quantities of one topology that fix the algorithms' parameters and rates."""

    n: int
    n_edges: int
    mu_gossip: float
    r_eff: NDArray[np.float64]
    r_max: float
    method: str

    @property
    def theta_rg(self) -> float:
        """Rate of randomized gossip as the paper quotes it: ``mu_gossip`` (up to a constant).

        The guaranteed bound on the expected error decays at ``mu_gossip / 2``: see
        :mod:`gossip.params`.
        """
        return self.mu_gossip

    @property
    def theta_arg(self) -> float:
        """Guaranteed rate of accelerated gossip: ``sqrt(mu_gossip / (2 R_max))``."""
        return math.sqrt(self.mu_gossip / (2.0 * self.r_max))

    def as_dict(self) -> dict[str, float | int | str]:
        """Return the scalar quantities as a JSON-ready dict."""
        return {
            "n": self.n,
            "n_edges": self.n_edges,
            "mu_gossip": self.mu_gossip,
            "r_max": self.r_max,
            "theta_rg": self.theta_rg,
            "theta_arg": self.theta_arg,
            "method": self.method,
        }


def laplacian(topology: Topology) -> scipy.sparse.csr_array:
    """Return ``L_P``, the Laplacian weighted by the edge probabilities, as a sparse matrix."""
    u, v = topology.edges[:, 0], topology.edges[:, 1]
    p = topology.probs
    n = topology.n
    rows = np.concatenate([u, v, u, v])
    cols = np.concatenate([v, u, u, v])
    vals = np.concatenate([-p, -p, p, p])
    return scipy.sparse.csr_array(scipy.sparse.coo_array((vals, (rows, cols)), shape=(n, n)))


def graph_quantities(
    topology: Topology, method: Literal["auto", "dense", "sparse"] = "auto"
) -> GraphQuantities:
    """Compute ``mu_gossip``, ``R_eff`` on every edge and ``R_max`` for ``topology``.

    Parameters
    ----------
    topology : Topology
        A connected topology with edge probabilities.
    method : {"auto", "dense", "sparse"}
        ``auto`` is dense up to :data:`DENSE_LIMIT` nodes and sparse above.

    Examples
    --------
    >>> from gossip.topology import parse_topology
    >>> q = graph_quantities(parse_topology("line:30"))
    >>> round(q.mu_gossip, 7), round(q.r_max, 6), round(q.theta_arg, 6)
    (0.0003778, 29.0, 0.002552)
    """
    if method == "auto":
        method = "dense" if topology.n <= DENSE_LIMIT else "sparse"
    if method == "dense":
        mu, r_eff = _dense(topology)
    elif method == "sparse":
        mu, r_eff = _sparse(topology)
    else:
        raise ConfigError(f"unknown method {method!r}; valid: auto, dense, sparse")
    return GraphQuantities(
        n=topology.n,
        n_edges=topology.n_edges,
        mu_gossip=mu,
        r_eff=r_eff,
        r_max=float(r_eff.max()),
        method=method,
    )


def _dense(topology: Topology) -> tuple[float, NDArray[np.float64]]:
    lap = laplacian(topology).toarray()
    evals, evecs = scipy.linalg.eigh(lap)
    # The kernel is the constant vector only (connected graph), so the pseudo-inverse drops
    # exactly the first eigenpair.
    pinv = (evecs[:, 1:] / evals[1:]) @ evecs[:, 1:].T
    u, v = topology.edges[:, 0], topology.edges[:, 1]
    r_eff = pinv[u, u] + pinv[v, v] - 2.0 * pinv[u, v]
    return float(evals[1]), np.asarray(r_eff, dtype=np.float64)


def _sparse(topology: Topology) -> tuple[float, NDArray[np.float64]]:
    lap = laplacian(topology)
    # Scale to entries of order one so that the shift below is meaningful whatever |E| is.
    scale = float(topology.probs.max())
    scaled = scipy.sparse.csc_array(lap / scale)
    n = topology.n
    mu = _second_eigenvalue(scaled) * scale

    # Grounding node 0 makes the Laplacian positive definite; the effective resistance between
    # u and v is then the quadratic form of the grounded inverse on e_u - e_v (e_0 := 0).
    grounded = scipy.sparse.csc_array(scaled[1:, 1:])
    lu = scipy.sparse.linalg.splu(
        grounded,
        permc_spec="MMD_AT_PLUS_A",
        diag_pivot_thresh=0.0,
        options={"SymmetricMode": True},
    )
    u, v = topology.edges[:, 0], topology.edges[:, 1]
    r_eff = np.empty(topology.n_edges, dtype=np.float64)
    for start in range(0, topology.n_edges, _BLOCK):
        stop = min(start + _BLOCK, topology.n_edges)
        cols = np.arange(stop - start)
        rhs = np.zeros((n, stop - start), dtype=np.float64)
        rhs[u[start:stop], cols] += 1.0
        rhs[v[start:stop], cols] -= 1.0
        rhs = rhs[1:]
        sol = lu.solve(rhs)
        r_eff[start:stop] = np.einsum("ij,ij->j", rhs, sol)
    return mu, r_eff / scale


def _second_eigenvalue(scaled: scipy.sparse.csc_array) -> float:
    n = scaled.shape[0]
    if n <= 3:
        return float(np.linalg.eigvalsh(scaled.toarray())[1])
    # Shift-invert around a small negative sigma: L - sigma I is positive definite, and the two
    # eigenvalues nearest sigma are 0 and mu_gossip.
    sigma = -1e-6
    vals = scipy.sparse.linalg.eigsh(
        scaled, k=2, sigma=sigma, which="LM", return_eigenvectors=False, tol=1e-12
    )
    return float(np.sort(vals)[1])
