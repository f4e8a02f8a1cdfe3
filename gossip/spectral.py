"""Graph quantities of a topology: mu_gossip, effective resistances, R_max and the rates.

With ``L_P`` the Laplacian weighted by the edge probabilities ``P_e``:

* ``mu_gossip`` is the smallest non-zero eigenvalue of ``L_P``;
* ``R_eff(v, w) = (e_v - e_w)^T L_P^+ (e_v - e_w)`` and ``R_max`` is its maximum over edges;
* ``theta_RG = mu_gossip`` and ``theta_ARG = sqrt(mu_gossip / (2 R_max))``.

Two exact paths compute them:

* ``dense`` (default up to :data:`DENSE_LIMIT` nodes): one symmetric eigendecomposition gives the
  spectrum and the pseudo-inverse at once. It needs NumPy only.
* ``sparse``: ``mu_gossip`` by shift-invert Lanczos (``scipy.sparse.linalg.eigsh``) and every
  ``R_eff`` by Laplacian solves against one sparse LU factorisation of the grounded Laplacian
  (node 0 removed, which makes it positive definite), in blocks of right-hand sides. No
  approximation is involved: the results agree with the dense path to solver precision. It
  needs SciPy, imported only here: the container image leaves SciPy out (55 MB), and a graph of
  more than :data:`DENSE_LIMIT` nodes there fails with a :class:`~gossip.errors.ConfigError`
  that says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Literal

import numpy as np
from numpy.typing import NDArray

from gossip.errors import ConfigError
from gossip.topology import Topology

if TYPE_CHECKING:
    import scipy.sparse

__all__ = ["DENSE_LIMIT", "GraphQuantities", "dense_laplacian", "graph_quantities", "laplacian"]

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
    """Return ``L_P``, the Laplacian weighted by the edge probabilities, as a sparse matrix.

    ``L_P = sum_e P_e (e_u - e_v)(e_u - e_v)^T`` over the edges ``e = (u, v)``.

    Raises
    ------
    ConfigError
        SciPy is not installed (see :func:`dense_laplacian` for a NumPy array).
    """
    sparse, _ = _scipy_sparse(topology, "a sparse Laplacian")
    u, v = topology.edges[:, 0], topology.edges[:, 1]
    p = topology.probs
    n = topology.n
    rows = np.concatenate([u, v, u, v])
    cols = np.concatenate([v, u, u, v])
    vals = np.concatenate([-p, -p, p, p])
    lap: scipy.sparse.csr_array = sparse.csr_array(
        sparse.coo_array((vals, (rows, cols)), shape=(n, n))
    )
    return lap


def dense_laplacian(topology: Topology) -> NDArray[np.float64]:
    """Return ``L_P`` as a dense ``(n, n)`` NumPy array (same matrix as :func:`laplacian`).

    Off the diagonal ``L_P[u, v] = -P_e`` for the edge ``e = (u, v)`` (0 for non-neighbours);
    on it ``L_P[v, v]`` is the sum of ``P_e`` over the edges at ``v``, so every row sums to 0.
    """
    u, v = topology.edges[:, 0], topology.edges[:, 1]
    p = topology.probs
    n = topology.n
    lap = np.zeros((n, n), dtype=np.float64)
    # A topology has no parallel edges, so plain assignment (not accumulation) is exact.
    lap[u, v] = -p
    lap[v, u] = -p
    lap[np.arange(n), np.arange(n)] = np.bincount(u, p, minlength=n) + np.bincount(
        v, p, minlength=n
    )
    return lap


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
    evals, evecs = np.linalg.eigh(dense_laplacian(topology))
    # The kernel is the constant vector only (connected graph), so the pseudo-inverse drops
    # exactly the first eigenpair.
    pinv = (evecs[:, 1:] / evals[1:]) @ evecs[:, 1:].T
    u, v = topology.edges[:, 0], topology.edges[:, 1]
    r_eff = pinv[u, u] + pinv[v, v] - 2.0 * pinv[u, v]
    return float(evals[1]), np.asarray(r_eff, dtype=np.float64)


def _scipy_sparse(topology: Topology, what: str) -> tuple[ModuleType, ModuleType]:
    """Import ``scipy.sparse`` and ``scipy.sparse.linalg``, or say why SciPy is needed."""
    try:
        import scipy.sparse
        import scipy.sparse.linalg
    except ImportError as exc:
        if topology.n > DENSE_LIMIT:
            why = (
                f"the graph {topology.spec!r} has {topology.n} nodes > DENSE_LIMIT = "
                f"{DENSE_LIMIT}, so its quantities take the sparse path"
            )
        else:
            why = f"{what} of the graph {topology.spec!r} ({topology.n} nodes)"
        raise ConfigError(
            f"{why}, which needs SciPy (not installed: {exc}): `pip install scipy`; "
            f"graphs of up to {DENSE_LIMIT} nodes need NumPy only (method 'dense')"
        ) from exc
    return scipy.sparse, scipy.sparse.linalg


def _sparse(topology: Topology) -> tuple[float, NDArray[np.float64]]:
    sparse, linalg = _scipy_sparse(topology, "the sparse path")
    lap = laplacian(topology)
    # Scale to entries of order one so that the shift below is meaningful whatever |E| is.
    scale = float(topology.probs.max())
    scaled = sparse.csc_array(lap / scale)
    n = topology.n
    mu = _second_eigenvalue(scaled, linalg) * scale

    # Grounding node 0 makes the Laplacian positive definite; the effective resistance between
    # u and v is then the quadratic form of the grounded inverse on e_u - e_v (e_0 := 0).
    grounded = sparse.csc_array(scaled[1:, 1:])
    lu = linalg.splu(
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


def _second_eigenvalue(scaled: scipy.sparse.csc_array, linalg: ModuleType) -> float:
    n = scaled.shape[0]
    if n <= 3:
        return float(np.linalg.eigvalsh(scaled.toarray())[1])
    # Shift-invert around a small negative sigma: L - sigma I is positive definite, and the two
    # eigenvalues nearest sigma are 0 and mu_gossip.
    sigma = -1e-6
    vals = linalg.eigsh(scaled, k=2, sigma=sigma, which="LM", return_eigenvectors=False, tol=1e-12)
    return float(np.sort(vals)[1])
