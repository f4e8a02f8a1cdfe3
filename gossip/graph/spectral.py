"""Graph quantities of a topology: mu_gossip, effective resistances, R_max and the rates.

With ``L_P`` the Laplacian weighted by the edge probabilities ``P_e``:

* ``mu_gossip`` is the smallest non-zero eigenvalue of ``L_P``;
* ``R_eff(v, w) = (e_v - e_w)^T L_P^+ (e_v - e_w)`` and ``R_max`` is its maximum over edges;
* ``theta_RG = mu_gossip`` and ``theta_ARG = sqrt(mu_gossip / (2 R_max))``.

Two exact paths and one estimate compute them:

* ``dense`` (default up to :data:`SPARSE_FROM` nodes, and up to :data:`DENSE_LIMIT` where SciPy
  is not installed or the graph is dense): one symmetric eigendecomposition gives the spectrum
  and the pseudo-inverse at once. It needs NumPy only. Its cost grows as ``n^3`` whatever the
  edges: at 1,024 nodes it took 0.7 s of CPU against 0.1-0.2 s for the sparse path below.
* ``sparse``: ``mu_gossip`` by shift-invert Lanczos (``scipy.sparse.linalg.eigsh``) and every
  ``R_eff`` by Laplacian solves against one sparse LU factorisation of the grounded Laplacian
  (node 0 removed, which makes it positive definite), in blocks of right-hand sides. No
  approximation is involved: the results agree with the dense path to solver precision. It
  needs SciPy, imported only here: the container image leaves SciPy out (55 MB), and a graph of
  more than :data:`DENSE_LIMIT` nodes there fails with a :class:`~gossip.errors.ConfigError`
  that says so. It costs one solve per edge, so ``auto`` takes it from :data:`SPARSE_FROM` nodes
  on a sparse graph (at most :data:`SPARSE_DEGREE` edges per node on average) up to
  :data:`EXACT_LIMIT`.
* ``jl`` (default above :data:`EXACT_LIMIT` nodes): ``mu_gossip`` exactly as above, and every
  ``R_eff`` estimated by the random projection of Spielman and Srivastava. With ``B`` the
  incidence matrix, ``W = diag(P)`` and ``Q`` a ``k x |E|`` matrix of independent signs
  ``+-1/sqrt(k)``, ``R_eff(u, v) = |W^1/2 B L_P^+ (e_u - e_v)|^2`` is estimated by
  ``|Z (e_u - e_v)|^2`` with ``Z = Q W^1/2 B L_P^+``: k Laplacian solves (against the same LU
  factorisation) instead of |E|. By the Johnson-Lindenstrauss bound for random signs
  (Achlioptas 2003), each estimate is within a factor ``1 +- eps`` of the truth except with
  probability ``2 exp(-(k/2)(eps^2/2 - eps^3/3))``; so with
  ``k = ceil(2 ln(2 |E| / delta) / (eps^2/2 - eps^3/3))`` *every* edge's estimate is, with
  probability at least ``1 - delta``. The defaults are ``eps = 0.3``, ``delta = 0.01``.

  ``R_max`` is then reported as ``max_e R~_e / (1 - eps)``: an *over*estimate, by a factor of
  at most ``(1 + eps) / (1 - eps)``, with probability ``>= 1 - delta``. That is the safe side.
  ARG's coupling ``c = 1 / sqrt(2 mu R_max)`` and rate ``eta = sqrt(mu / (2 R_max))`` shrink
  with a larger ``R_max``, and the theorem's guarantee holds for any ``R >= R_max`` (with the
  rate ``sqrt(mu / (2 R))``, at most ``sqrt((1 + eps) / (1 - eps))`` = 1.36 times slower); an
  underestimate gives a larger coupling than the theorem allows, which can diverge (as the
  paper's misprinted coefficient, twice too large, does).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray

from continuized.gossip.errors import ConfigError, install_command
from continuized.gossip.graph.topology import Topology

if TYPE_CHECKING:
    import scipy.sparse

__all__ = [
    "DENSE_LIMIT",
    "EXACT_LIMIT",
    "SPARSE_DEGREE",
    "SPARSE_FROM",
    "GraphQuantities",
    "dense_laplacian",
    "graph_quantities",
    "jl_dimension",
    "laplacian",
]

DENSE_LIMIT = 1500
"""Largest node count for which ``method="auto"`` takes the dense path."""

EXACT_LIMIT = 4000
"""Largest node count for which ``method="auto"`` computes every ``R_eff`` exactly."""

SPARSE_FROM = 512
"""Smallest node count for which ``method="auto"`` takes the sparse path where SciPy is installed
(and the graph has at most :data:`SPARSE_DEGREE` edges per node). Both paths agree to 1e-11 or
better there (tests/gossip/graph/test_spectral.py); below it the dense path is as quick."""

SPARSE_DEGREE = 4
"""Most edges per node (``|E| / n``) for which ``auto`` prefers the sparse path below
:data:`DENSE_LIMIT`: it costs one solve per edge, so a dense graph (complete:300, 45k edges:
4 s against 0.02 s) stays on the dense path."""

_BLOCK = 256  # right-hand sides per sparse solve: bounds memory to n * 256 floats
_PROJECTED_VALUES = 1 << 24  # most values (edges x rows) of one JL block's temporaries
_THREADED_SOLVE = 1_000_000  # values (nodes x columns) above which the solves share threads


@dataclass(frozen=True, eq=False)
class GraphQuantities:
    """The quantities of one topology that fix the algorithms' parameters and rates."""

    n: int
    n_edges: int
    mu_gossip: float
    r_eff: NDArray[np.float64]
    r_max: float
    method: str
    eps: float = 0.0
    delta: float = 0.0
    """``eps``: relative error bound of each ``r_eff`` (0: exact, up to solver precision);
    ``delta``: probability that some edge misses it (method ``jl``; ``r_max`` then includes the
    ``1 / (1 - eps)`` inflation, see the module docstring)."""

    @property
    def theta_rg(self) -> float:
        """Rate of randomized gossip as the paper quotes it: ``mu_gossip`` (up to a constant).

        The guaranteed bound on the expected error decays at ``mu_gossip / 2``: see
        :mod:`gossip.model.algorithms`.
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
            "eps": self.eps,
            "delta": self.delta,
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


def jl_dimension(n_edges: int, eps: float, delta: float) -> int:
    """Return k, the solves that make every edge's JL estimate ``1 +- eps`` w.p. ``1 - delta``.

    ``k = ceil(2 ln(2 |E| / delta) / (eps^2 / 2 - eps^3 / 3))`` (see the module docstring).

    Examples
    --------
    >>> jl_dimension(19_800, 0.3, 0.01)
    844
    """
    if not 0.0 < eps < 1.0:
        raise ConfigError(f"eps must be in (0, 1), got {eps!r}")
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"delta must be in (0, 1), got {delta!r}")
    return math.ceil(2.0 * math.log(2.0 * n_edges / delta) / (eps**2 / 2.0 - eps**3 / 3.0))


def graph_quantities(
    topology: Topology,
    method: Literal["auto", "dense", "sparse", "jl"] = "auto",
    *,
    eps: float = 0.3,
    delta: float = 0.01,
    seed: int = 0,
) -> GraphQuantities:
    """Compute ``mu_gossip``, ``R_eff`` on every edge and ``R_max`` for ``topology``.

    Parameters
    ----------
    topology : Topology
        A connected topology with edge probabilities.
    method : {"auto", "dense", "sparse", "jl"}
        ``auto`` is dense below :data:`SPARSE_FROM` nodes, sparse from there (on a sparse graph,
        where SciPy is installed; else dense up to :data:`DENSE_LIMIT`) up to
        :data:`EXACT_LIMIT`, and jl above (see the module docstring for the estimate's bound).
    eps, delta : float
        Method ``jl`` only: relative error of each ``R_eff`` and failure probability, in (0, 1).
    seed : int
        Method ``jl`` only: seed of the random signs (the result is reproducible).

    Examples
    --------
    >>> from continuized.gossip.graph.topology import parse_topology
    >>> q = graph_quantities(parse_topology("line:30"))
    >>> round(q.mu_gossip, 7), round(q.r_max, 6), round(q.theta_arg, 6)
    (0.0003778, 29.0, 0.002552)
    """
    if method == "auto":
        if topology.n <= DENSE_LIMIT and not _prefer_sparse(topology):
            method = "dense"
        else:
            method = "sparse" if topology.n <= EXACT_LIMIT else "jl"
    if method == "dense":
        mu, r_eff = _dense(topology)
    elif method == "sparse":
        mu, r_eff = _sparse(topology)
    elif method == "jl":
        k = jl_dimension(topology.n_edges, eps, delta)
        mu, r_eff = _sparse(topology, projections=k, seed=seed)
        return GraphQuantities(
            n=topology.n,
            n_edges=topology.n_edges,
            mu_gossip=mu,
            r_eff=r_eff,
            r_max=float(r_eff.max()) / (1.0 - eps),  # the safe side: see the module docstring
            method=method,
            eps=eps,
            delta=delta,
        )
    else:
        raise ConfigError(f"unknown method {method!r}; valid: auto, dense, sparse, jl")
    return GraphQuantities(
        n=topology.n,
        n_edges=topology.n_edges,
        mu_gossip=mu,
        r_eff=r_eff,
        r_max=float(r_eff.max()),
        method=method,
    )


def _prefer_sparse(topology: Topology) -> bool:
    """Is the sparse path the cheaper exact one for this graph below :data:`DENSE_LIMIT`?"""
    if topology.n < SPARSE_FROM or topology.n_edges > SPARSE_DEGREE * topology.n:
        return False
    try:  # the container image has no SciPy: the dense path then, as before
        import scipy.sparse.linalg  # noqa: F401
    except ImportError:
        return False
    return True


_ONE_THREAD_BELOW = 500  # nodes: a smaller eigendecomposition is quicker on one BLAS thread


def _dense(topology: Topology) -> tuple[float, NDArray[np.float64]]:
    lap = dense_laplacian(topology)
    # OpenBLAS' threads cost far more than they save on a small matrix: grid:15x15 took 0.6 s
    # of CPU (1.8 s of wall on a busy machine) with two threads against 7 ms with one.
    with _one_blas_thread(topology.n < _ONE_THREAD_BELOW):
        evals, evecs = np.linalg.eigh(lap)
    # The kernel is the constant vector only (connected graph), so the pseudo-inverse drops
    # exactly the first eigenpair.
    pinv = (evecs[:, 1:] / evals[1:]) @ evecs[:, 1:].T
    u, v = topology.edges[:, 0], topology.edges[:, 1]
    r_eff = pinv[u, u] + pinv[v, v] - 2.0 * pinv[u, v]
    return float(evals[1]), np.asarray(r_eff, dtype=np.float64)


@contextlib.contextmanager
def _one_blas_thread(wanted: bool) -> Iterator[None]:
    """Limit BLAS to one thread inside the block if ``wanted`` and threadpoolctl is installed."""
    if not wanted:
        yield
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: only a matter of speed
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


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
            f"{why}, which needs SciPy (not installed: {exc}): {install_command('sim')}; "
            f"graphs of up to {DENSE_LIMIT} nodes need NumPy only (method 'dense')"
        ) from exc
    return scipy.sparse, scipy.sparse.linalg


def _sparse(
    topology: Topology, projections: int | None = None, seed: int = 0
) -> tuple[float, NDArray[np.float64]]:
    """``mu_gossip`` and every ``R_eff``: exact, or JL estimates from ``projections`` solves."""
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
    if projections is not None:
        return mu, _projected(lu, u, v, topology.probs / scale, n, projections, seed) / scale
    r_eff = np.empty(topology.n_edges, dtype=np.float64)
    for start in range(0, topology.n_edges, _BLOCK):
        stop = min(start + _BLOCK, topology.n_edges)
        cols = np.arange(stop - start)
        rhs = np.zeros((n, stop - start), dtype=np.float64)
        rhs[u[start:stop], cols] += 1.0
        rhs[v[start:stop], cols] -= 1.0
        rhs = rhs[1:]
        sol = _solve(lu, rhs)
        r_eff[start:stop] = np.einsum("ij,ij->j", rhs, sol)
    return mu, r_eff / scale


def _projected(
    lu: Any,
    u: NDArray[np.int64],
    v: NDArray[np.int64],
    weights: NDArray[np.float64],
    n: int,
    k: int,
    seed: int,
) -> NDArray[np.float64]:
    """JL estimates of ``R_eff`` on every edge: ``|Z (e_u - e_v)|^2``, ``Z = Q W^1/2 B L^+``.

    ``weights`` are the (scaled) ``P_e`` of the factorised Laplacian; ``Q`` has ``k`` rows of
    random signs over ``sqrt(k)``, drawn and solved ``_BLOCK`` rows at a time (fewer on a graph
    of more than ``_PROJECTED_VALUES / _BLOCK`` edges).
    """
    rng = np.random.default_rng(seed)
    root = np.sqrt(weights)
    # B^T as a sparse (n, |E|) matrix: +1 at (u_e, e), -1 at (v_e, e); one product per block
    # instead of np.add.at, which is ten times slower.
    from scipy.sparse import csr_array

    edge = np.arange(len(u))
    incidence = csr_array(
        (
            np.concatenate((np.ones(len(u)), -np.ones(len(u)))),
            (np.concatenate((u, v)), np.concatenate((edge, edge))),
        ),
        shape=(n, len(u)),
    )
    total = np.zeros(len(u), dtype=np.float64)
    # Fewer rows per block on a large graph: each (|E|, rows) temporary stays under 128 MB
    # (grid:316x316 peaked at 2.8 GB with 256 rows). Small graphs keep their 256-row blocks.
    block = max(1, min(_BLOCK, _PROJECTED_VALUES // len(u)))
    for start in range(0, k, block):
        rows = min(block, k - start)
        signs = rng.integers(0, 2, size=(len(u), rows), dtype=np.int8) * 2.0 - 1.0
        load = signs * (root / math.sqrt(k))[:, None]  # (Q W^1/2)^T, edge by edge
        # B^T (Q W^1/2)^T: +row at u, -row at v; its columns sum to 0 (L's range).
        rhs = np.asarray(incidence @ load)
        # Grounded at node 0 (Z row 0 = 0): a solution up to a constant, which the
        # differences below cancel.
        sol = np.zeros((n, rows), dtype=np.float64)
        sol[1:] = _solve(lu, rhs[1:])
        gap = incidence.T @ sol  # row e: sol[u_e] - sol[v_e]
        total += np.einsum("ij,ij->i", gap, gap)
    return total


def _solve(lu: Any, rhs: NDArray[np.float64]) -> NDArray[np.float64]:
    """``lu.solve(rhs)`` one column at a time: SuperLU's own multi-column solve is 4-6 times
    slower than this loop (grid:100x100, 64 columns: 0.3 s against 0.06 s of CPU). SuperLU
    releases the GIL, so the columns of a large system are shared between one thread per CPU."""
    sol = np.empty(rhs.shape, dtype=np.float64, order="F")

    def columns(part: range) -> None:
        for j in part:
            sol[:, j] = lu.solve(np.ascontiguousarray(rhs[:, j]))

    threads = min(os.cpu_count() or 1, rhs.shape[1])
    if threads <= 1 or rhs.size < _THREADED_SOLVE:
        columns(range(rhs.shape[1]))
        return sol
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="gossip-solve") as pool:
        list(pool.map(columns, [range(i, rhs.shape[1], threads) for i in range(threads)]))
    return sol


def _second_eigenvalue(scaled: scipy.sparse.csc_array, linalg: ModuleType) -> float:
    n = scaled.shape[0]
    if n <= 3:
        return float(np.linalg.eigvalsh(scaled.toarray())[1])
    # Shift-invert around a small negative sigma: L - sigma I is positive definite, and the two
    # eigenvalues nearest sigma are 0 and mu_gossip.
    sigma = -1e-6
    vals = linalg.eigsh(scaled, k=2, sigma=sigma, which="LM", return_eigenvectors=False, tol=1e-12)
    return float(np.sort(vals)[1])
