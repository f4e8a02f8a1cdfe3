"""Graph quantities: the SPEC's reference values, closed forms, and dense against sparse."""

from __future__ import annotations

import numpy as np
import pytest

from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.spectral import (
    SPARSE_DEGREE,
    SPARSE_FROM,
    graph_quantities,
    laplacian,
)
from continuized.gossip.graph.topology import parse_topology


@pytest.mark.parametrize(
    ("spec", "mu", "r_max", "theta_arg"),
    [
        ("line:30", 3.778e-4, 29.0, 2.552e-3),
        ("grid:15x15", 1.0406e-4, 293.02, 4.214e-4),
        ("complete:10", 0.2222, 9.0, 0.1111),
    ],
)
def test_reference_values_of_the_spec(spec: str, mu: float, r_max: float, theta_arg: float) -> None:
    q = graph_quantities(parse_topology(spec))
    assert q.mu_gossip == pytest.approx(mu, rel=2e-4)
    assert q.r_max == pytest.approx(r_max, rel=1e-4)
    assert q.theta_arg == pytest.approx(theta_arg, rel=2e-4)
    assert q.theta_rg == q.mu_gossip


@pytest.mark.parametrize("n", [2, 5, 12])
def test_closed_forms_on_lines_and_complete_graphs(n: int) -> None:
    line = graph_quantities(parse_topology(f"line:{n}"))
    # L_P = L / (n - 1); path spectrum 2 - 2 cos(pi k / n); every edge is a bridge: R = n - 1.
    assert line.mu_gossip == pytest.approx((2 - 2 * np.cos(np.pi / n)) / (n - 1))
    np.testing.assert_allclose(line.r_eff, n - 1)
    complete = graph_quantities(parse_topology(f"complete:{n}"))
    assert complete.mu_gossip == pytest.approx(2.0 / (n - 1))
    assert complete.r_max == pytest.approx(n - 1)


def test_effective_resistance_is_the_pseudo_inverse_form() -> None:
    topo = parse_topology("er:25:0.3:3")
    pinv = np.linalg.pinv(laplacian(topo).toarray())
    q = graph_quantities(topo)
    for k, (u, v) in enumerate(topo.edges):
        e = np.zeros(topo.n)
        e[u], e[v] = 1.0, -1.0
        assert q.r_eff[k] == pytest.approx(e @ pinv @ e, rel=1e-9)
    # Foster's theorem: sum_e P_e R_eff(e) = n - 1.
    assert float(topo.probs @ q.r_eff) == pytest.approx(topo.n - 1, rel=1e-9)


@pytest.mark.parametrize("spec", ["grid:12x9", "torus:6x7", "rgg:120:0.2:1", "line:40"])
def test_dense_and_sparse_agree(spec: str) -> None:
    topo = parse_topology(spec)
    dense = graph_quantities(topo, method="dense")
    sparse = graph_quantities(topo, method="sparse")
    assert sparse.method == "sparse"
    assert sparse.mu_gossip == pytest.approx(dense.mu_gossip, rel=1e-7)
    np.testing.assert_allclose(sparse.r_eff, dense.r_eff, rtol=1e-8)
    assert sparse.as_dict()["theta_arg"] == pytest.approx(dense.theta_arg, rel=1e-7)


# From SPARSE_FROM nodes ``auto`` takes the sparse path on a sparse graph: it must give the
# dense path's figures there, on the graphs whose spectra are the hardest (a line's mu_gossip is
# ~1e-5, a cycle's and a grid's eigenvalues come in pairs).
@pytest.mark.parametrize("spec", ["grid:24x24", "line:600", "cycle:700", "torus:20x30"])
def test_auto_takes_the_sparse_path_from_sparse_from_with_the_dense_figures(spec: str) -> None:
    topo = parse_topology(spec)
    assert topo.n >= SPARSE_FROM
    auto = graph_quantities(topo)
    dense = graph_quantities(topo, method="dense")
    assert auto.method == "sparse"
    assert auto.mu_gossip == pytest.approx(dense.mu_gossip, rel=1e-9)
    np.testing.assert_allclose(auto.r_eff, dense.r_eff, rtol=1e-9)
    assert auto.r_max == pytest.approx(dense.r_max, rel=1e-9)


def test_auto_stays_dense_below_sparse_from_and_on_a_dense_graph() -> None:
    assert graph_quantities(parse_topology("grid:20x20")).method == "dense"  # 400 nodes
    # complete:520: 134,940 edges, one solve each on the sparse path; dense is far cheaper.
    topo = parse_topology("complete:520")
    assert topo.n >= SPARSE_FROM
    assert topo.n_edges > SPARSE_DEGREE * topo.n
    assert graph_quantities(topo).method == "dense"


def test_unknown_method() -> None:
    with pytest.raises(ConfigError, match="unknown method 'fast'"):
        graph_quantities(parse_topology("line:4"), method="fast")  # type: ignore[arg-type]
