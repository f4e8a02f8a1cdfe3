"""Every package names its public API in ``__all__``, and every name there resolves."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PACKAGES = [
    "continuized.gossip",
    "continuized.gossip.optim",
    "continuized.gossip.sim",
    "continuized.node",
    "continuized.coordinator",
    "continuized.coordinator.dashboard",
    "continuized.cli",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_the_public_api_and_each_resolves(name: str) -> None:
    package = importlib.import_module(name)
    exported = package.__all__
    assert isinstance(exported, list)
    assert len(set(exported)) == len(exported), "duplicates in __all__"
    for attr in exported:
        assert getattr(package, attr) is not None, f"{name}.{attr}"


def test_coordinator_exports_its_entry_points() -> None:
    from continuized import coordinator
    from continuized.coordinator.figures.state import ClusterState
    from continuized.coordinator.run.service import Coordinator

    assert coordinator.Coordinator is Coordinator
    assert coordinator.ClusterState is ClusterState
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = coordinator.no_such_name  # type: ignore[attr-defined]


def test_importing_the_coordinators_state_stays_light() -> None:
    # The dashboard and the tests import coordinator.figures.state: the package must not pull in the
    # sockets and the broker client with it (its public names are imported on first use).
    code = (
        "import sys, continuized.coordinator.figures.state; "
        "print('zmq' in sys.modules, 'aiomqtt' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
