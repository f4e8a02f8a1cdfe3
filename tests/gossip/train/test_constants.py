"""The A²CiD² constants: the authors' reference values, and a direct dense computation."""

from __future__ import annotations

import numpy as np
import pytest

from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.topology import parse_topology
from continuized.gossip.train import acid_constants


@pytest.mark.parametrize(
    ("graph", "rate", "eta", "alpha"),
    [
        ("cycle:64", 1.0, 0.0350, 7.262),
        ("cycle:64", 2.0, 0.0699, 7.262),
        ("cycle:32", 1.0, 0.0704, 3.665),
    ],
)
def test_reference_values_of_the_official_code(
    graph: str, rate: float, eta: float, alpha: float
) -> None:
    c = acid_constants(parse_topology(graph), rate)
    assert round(c.eta, 4) == eta
    assert round(c.alpha_tilde, 3) == alpha


def test_cycle_32_chi() -> None:
    c = acid_constants(parse_topology("cycle:32"), 1.0)
    assert round(c.chi1, 2) == 52.04
    assert round(c.chi2, 4) == 0.9688


@pytest.mark.parametrize("graph", ["star:6", "grid:3x4", "line:5", "complete:5"])
@pytest.mark.parametrize("rate", [0.5, 3.0])
def test_equal_a_dense_communication_laplacian(graph: str, rate: float) -> None:
    # Straight from the definition: edge rates lambda_e = P_e n r / 2, L = sum lambda_e b b^T.
    topo = parse_topology(graph)
    n = topo.n
    lap = np.zeros((n, n))
    for (i, j), p in zip(topo.edges, topo.probs, strict=True):
        b = np.zeros(n)
        b[i], b[j] = 1.0, -1.0
        lap += p * n * rate / 2 * np.outer(b, b)
    # every node communicates at `rate` on average
    assert np.isclose(np.trace(lap) / n, rate)
    chi1 = 1 / np.linalg.eigvalsh(lap)[1]
    pinv = np.linalg.pinv(lap)
    chi2 = max(0.5 * (pinv[i, i] + pinv[j, j] - 2 * pinv[i, j]) for i, j in topo.edges)
    c = acid_constants(topo, rate)
    assert np.isclose(c.chi1, chi1, rtol=1e-9)
    assert np.isclose(c.chi2, chi2, rtol=1e-9)
    assert np.isclose(c.eta, 1 / (2 * np.sqrt(chi1 * chi2)), rtol=1e-9)
    assert np.isclose(c.alpha_tilde, np.sqrt(chi1 / chi2) / 2, rtol=1e-9)


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_rate_is_named(rate: float) -> None:
    with pytest.raises(ConfigError, match="communication rate"):
        acid_constants(parse_topology("cycle:5"), rate)
