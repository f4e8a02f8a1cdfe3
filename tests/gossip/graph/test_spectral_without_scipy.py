"""Graph quantities where SciPy is not installed (the container image): NumPy's dense path gives
the same values, and the sparse path says what to install.

SciPy is blocked in a subprocess by a meta-path finder that refuses every ``scipy`` import, as if
the package were not installed; the values are compared with this process, which has SciPy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology

ROOT = Path(__file__).resolve().parents[3]

# rgg: networkx finds the neighbours with a SciPy KD-tree when it can and by brute force when it
# cannot; the topology (and so every quantity) must not depend on which.
# grid:24x24 (576 nodes): past SPARSE_FROM, where auto takes the sparse path if SciPy is there.
SPECS = [
    "line:30",
    "grid:15x15",
    "grid:24x24",
    "complete:10",
    "torus:6x7",
    "er:25:0.3:3",
    "rgg:120:0.2:1",
]

_NO_SCIPY = """
import importlib.abc, json, sys

class NoScipy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "scipy" or name.startswith("scipy."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None

sys.meta_path.insert(0, NoScipy())
from continuized.gossip.errors import ConfigError
from continuized.gossip.graph.spectral import graph_quantities
from continuized.gossip.graph.topology import parse_topology

out = {}
for spec in sys.argv[1:]:
    topo = parse_topology(spec)
    q = graph_quantities(topo)
    out[spec] = {"edges": topo.edges.tolist(), "mu": q.mu_gossip, "r_eff": q.r_eff.tolist(),
                 "method": q.method}
errors = {}
for spec, method in [("grid:3x3", "sparse"), ("grid:40x41", "auto")]:
    try:
        graph_quantities(parse_topology(spec), method=method)
    except ConfigError as exc:
        errors[spec] = str(exc)
out["errors"] = errors
out["scipy_loaded"] = sorted(m for m in sys.modules if m.split(".")[0] == "scipy")
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def without_scipy() -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _NO_SCIPY, *SPECS],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    assert result["scipy_loaded"] == []
    return result


@pytest.mark.parametrize("spec", SPECS)
def test_dense_path_without_scipy_gives_the_same_values(
    without_scipy: dict[str, object], spec: str
) -> None:
    got = without_scipy[spec]
    assert isinstance(got, dict)
    topo = parse_topology(spec)
    np.testing.assert_array_equal(np.array(got["edges"]), topo.edges)
    assert got["method"] == "dense"
    dense = graph_quantities(topo, method="dense")
    assert got["mu"] == dense.mu_gossip
    np.testing.assert_array_equal(np.array(got["r_eff"]), dense.r_eff)
    # And against SciPy's sparse path, an independent computation (Lanczos and an LU solve).
    sparse = graph_quantities(topo, method="sparse")
    assert got["mu"] == pytest.approx(sparse.mu_gossip, rel=1e-7)
    np.testing.assert_allclose(np.array(got["r_eff"]), sparse.r_eff, rtol=1e-8)


def test_sparse_path_without_scipy_says_what_to_install(
    without_scipy: dict[str, object],
) -> None:
    errors = without_scipy["errors"]
    assert isinstance(errors, dict)
    assert set(errors) == {"grid:3x3", "grid:40x41"}
    assert "1640 nodes > DENSE_LIMIT = 1500" in errors["grid:40x41"]
    assert "'grid:3x3' (9 nodes)" in errors["grid:3x3"]
    for message in errors.values():
        assert "pip install 'continuized-gossip[sim]'" in message
