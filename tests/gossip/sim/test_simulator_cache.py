"""Whether a numba kernel's first call compiles it (gossip.sim.compiled.compiles_first)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from continuized.gossip.sim.compiled import compiles_first

pytest.importorskip("numba")

_SOURCE = """
from numba import njit


@njit(cache=True)
def plus(x):
    return x + {step}
"""


def _load(path: Path, name: str) -> ModuleType:
    """Import ``path`` as a new module ``name``: a fresh dispatcher, as in a new process."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_kernel_compiles_until_numbas_cache_holds_its_source(tmp_path: Path) -> None:
    path = tmp_path / "tiny_kernel.py"
    path.write_text(_SOURCE.format(step=1))
    first = _load(path, "tiny_kernel_a")
    assert compiles_first(first.plus)  # cold: no cache next to the source yet
    assert first.plus(1) == 2
    assert not compiles_first(first.plus)  # compiled in this process
    assert not compiles_first(_load(path, "tiny_kernel_b").plus)  # loaded from the cache
    path.write_text(_SOURCE.format(step=20))  # another source: the cached build is stale
    assert compiles_first(_load(path, "tiny_kernel_c").plus)


def test_what_is_not_a_cached_dispatcher_is_not_said_to_compile() -> None:
    from numba import njit

    def plus(x: int) -> int:
        return x + 1

    assert not compiles_first(plus)
    assert not compiles_first(njit(plus))  # no cache=True: nothing on disk to look at


def test_whether_the_first_sweep_compiles_the_simulators_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from continuized.gossip.sim import compiled
    from continuized.gossip.sim.kernel import sweep_runs

    monkeypatch.setattr(compiled, "compiles_first", lambda asked: asked is sweep_runs)
    assert compiled.kernel_compiles()  # asked of the sweep's own kernel
    monkeypatch.setenv("GOSSIP_SIM_ENGINE", "numpy")  # the numpy engine compiles nothing
    assert not compiled.kernel_compiles()
