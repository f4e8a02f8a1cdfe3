"""The two backends of the exchange arithmetic give the same bits for the same inputs, and the
choice between them keeps numba out of a small model's process."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from continuized.gossip.model import arithmetic
from continuized.gossip.model.arithmetic import Backend, numpy_blocks
from continuized.gossip.model.arithmetic.numpy_blocks import BLOCK

HAS_NUMBA = importlib.util.find_spec("numba") is not None

Inputs = dict[str, Any]
Run = Callable[[Backend, Inputs], list[Any]]


def _out(n: Inputs, count: int) -> list[np.ndarray]:
    return [np.full(n["dim"], 7.0, n["out"]) for _ in range(count)]


def _state(ops: Backend, n: Inputs) -> list[Any]:
    x, z = _out(n, 2)
    ops.state(n["r"][0], n["r"][1], n["s"][0], x, z)
    return [x, z]


def _state_x(ops: Backend, n: Inputs) -> list[Any]:
    (x,) = _out(n, 1)
    ops.state_x(n["r"][0], n["r"][1], n["s"][0], x)
    return [x]


def _flow(ops: Backend, n: Inputs) -> list[Any]:
    dx, dz = _out(n, 2)
    return [ops.flow(n["p"], n["q"], n["s"][0], n["s"][1], dx, dz), dx, dz]


def _state_flow(ops: Backend, n: Inputs) -> list[Any]:
    dx, dz = _out(n, 2)
    sums = (n["r"][0], n["r"][1])
    return [ops.state_flow(sums, n["s"][0], n["p"], n["s"][1], n["s"][2], dx, dz), dx, dz]


def _all_finite(ops: Backend, n: Inputs) -> list[Any]:
    return [ops.all_finite(n["p"]), ops.all_finite(n["r"][0])]


def _half_parts(ops: Backend, n: Inputs) -> list[Any]:
    a, d = np.empty(n["dim"]), np.empty(n["dim"])
    return [ops.half_parts(n["p"], n["q"], n["s"][0], n["s"][1], a, d), a, d]


def _add_flow(ops: Backend, n: Inputs) -> list[Any]:
    rows = n["r"][2:]
    ops.add_flow(n["r"][0], n["r"][1], *rows)
    return rows


def _book(ops: Backend, n: Inputs) -> list[Any]:
    rows = n["r"][:4]
    scratch = (np.empty(n["dim"]), np.empty(n["dim"]))  # its contents are no result
    return [ops.book(n["p"], n["q"], n["s"][0], n["s"][1], tuple(rows), scratch), *rows]  # type: ignore[arg-type]


def _add_halves(ops: Backend, n: Inputs) -> list[Any]:
    rows = n["r"][:4]
    ops.add_halves(n["p"], n["q"], n["s"][0], n["s"][1], *rows)
    return rows


def _add_sums(ops: Backend, n: Inputs) -> list[Any]:
    sums = n["r"][:2]
    ops.add_sums(n["p"], n["q"], n["s"][0], n["s"][1], *sums)
    return sums


def _pending_state(ops: Backend, n: Inputs) -> list[Any]:
    x, z = _out(n, 2)
    sums = n["r"][:2]
    ops.pending_state(n["p"], n["q"], n["s"][0], n["s"][1], *sums, n["s"][2], x, z)
    return [x, z, *sums]  # the sums only read


# Every function of the API but one_pass, which the NumPy blocks answer False by design.
RUNS: dict[str, Run] = {
    "state": _state,
    "state_x": _state_x,
    "flow": _flow,
    "state_flow": _state_flow,
    "all_finite": _all_finite,
    "half_parts": _half_parts,
    "add_flow": _add_flow,
    "book": _book,
    "add_halves": _add_halves,
    "add_sums": _add_sums,
    "pending_state": _pending_state,
}


def test_every_function_of_the_api_is_compared() -> None:
    api = {name for name in vars(Backend) if not name.startswith("_")}
    assert api == set(RUNS) | {"one_pass"}


DTYPES = st.sampled_from([np.float64, np.float32])
SCALARS = st.one_of(
    st.floats(-4.0, 4.0), st.floats(-1e300, 1e300), st.sampled_from([0.0, -0.0, 0.5, -1.0])
)


@st.composite
def inputs(draw: st.DrawFn) -> Inputs:
    """Arrays of any float values (huge ones overflow; the flows may hold inf and nan), short
    or past a block's edge (the short draw repeated), and scalars small and huge."""
    size = draw(st.integers(1, 24))
    dim = size + draw(st.sampled_from([0, BLOCK]))
    flow_dtype = draw(DTYPES)
    width = 32 if flow_dtype == np.float32 else 64

    def stretched(dtype: type, values: st.SearchStrategy[float]) -> np.ndarray:
        drawn = draw(arrays(dtype, size, elements=values))
        return np.resize(drawn, dim)

    flows = st.floats(width=width)
    sums = st.floats(allow_nan=False, allow_infinity=False)
    return {
        "dim": dim,
        "out": draw(DTYPES),
        "p": stretched(flow_dtype, flows),
        "q": stretched(flow_dtype, flows),
        "r": [stretched(np.float64, sums) for _ in range(6)],
        "s": [draw(SCALARS) for _ in range(3)],
    }


def _bits(value: Any) -> Any:
    """A result as bytes, every nan alike (which nan an invalid operation makes is no part of
    the formula), or a bool as it is."""
    if isinstance(value, np.ndarray):
        value = value.copy()
        value[np.isnan(value)] = np.nan
        return value.tobytes()
    assert isinstance(value, bool)
    return value


def _copied(n: Inputs) -> Inputs:
    return {k: [a.copy() for a in v] if k == "r" else v for k, v in n.items()}


@pytest.mark.skipif(not HAS_NUMBA, reason="numba is not installed: one backend only")
@pytest.mark.parametrize("name", sorted(RUNS))
@settings(max_examples=40, deadline=None)
@given(n=inputs())
def test_both_backends_give_the_same_bits(name: str, n: Inputs) -> None:
    from continuized.gossip.model.arithmetic import numba_loops

    run = RUNS[name]
    with np.errstate(all="ignore"):  # overflow is part of the inputs
        blocks = run(numpy_blocks, _copied(n))
        loops = run(numba_loops, _copied(n))
    assert [_bits(v) for v in loops] == [_bits(v) for v in blocks]


@pytest.mark.skipif(not HAS_NUMBA, reason="numba is not installed: one backend only")
def test_a_large_size_gets_the_numba_loops_and_a_small_one_the_numpy_blocks() -> None:
    from continuized.gossip.model.arithmetic import numba_loops

    assert arithmetic.for_size(arithmetic.COMPILED_MIN_DIM) is numba_loops
    assert arithmetic.for_size(arithmetic.COMPILED_MIN_DIM - 1) is numpy_blocks


_SMALL_MODEL = """
import json, sys
import numpy as np
from continuized.gossip.model.parameters import ParameterLedger, all_finite
from continuized.gossip.model import arithmetic
a, b = ParameterLedger(np.zeros(1000), [0], 0.5), ParameterLedger(np.ones(1000), [0], 0.5)
dx, dz = b.flow_at(a.wire_state(1.0)[0], 1.0, 1.5)
a.add_values(0, dx, dz, 1.0)
b.add_values(0, dx, dz, 1.0, sign=-1.0)
a.settle()
seen = {"small": "numba" in sys.modules, "finite": all_finite(a.x_values(2.0))}
seen["large"] = arithmetic.for_size(arithmetic.COMPILED_MIN_DIM).__name__
seen["numba_after"] = "numba" in sys.modules
print(json.dumps(seen))
"""


def test_a_small_model_never_imports_numba() -> None:
    """A small model's exchange leaves numba out of the process; the first large size brings it
    in, where it is installed."""
    done = subprocess.run(
        [sys.executable, "-c", _SMALL_MODEL], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["small"] is False
    assert seen["finite"] is True
    large = "numba_loops" if HAS_NUMBA else "numpy_blocks"
    assert seen["large"] == f"continuized.gossip.model.arithmetic.{large}"
    assert seen["numba_after"] is HAS_NUMBA
