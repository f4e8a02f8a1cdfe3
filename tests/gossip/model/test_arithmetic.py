"""Both backends of the exchange arithmetic (NumPy blocks, numba loops) equal the plain formulas,
to the bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from continuized.gossip.model import arithmetic
from continuized.gossip.model.arithmetic import Backend, numpy_blocks, stored_below
from continuized.gossip.model.arithmetic.numpy_blocks import BLOCK

# Sizes around a block's edge, and one of several blocks.
DIMS = st.sampled_from([1, 7, BLOCK - 1, BLOCK + 5, 3 * BLOCK + 1])
DTYPES = st.sampled_from([np.float64, np.float32])
SCALARS = st.floats(-4.0, 4.0, allow_nan=False)


@pytest.fixture(params=["numpy", "compiled"])
def ops(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Backend:
    """Each test runs on the NumPy blocks and on the numba loops (at every size); the same
    for every example hypothesis draws, which is why the health check is off for it."""
    if request.param == "compiled":
        pytest.importorskip("numba")
        monkeypatch.setattr(arithmetic, "COMPILED_MIN_DIM", 1)
        backend = arithmetic.for_size(1)
        assert backend is not numpy_blocks
        return backend
    monkeypatch.setattr(arithmetic, "COMPILED_MIN_DIM", 1 << 62)
    return arithmetic.for_size(1 << 61)


def _arrays(seed: int, dim: int, count: int, dtype: type = np.float64) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal(dim) * 10.0 ** rng.integers(-3, 4)).astype(dtype) for _ in range(count)
    ]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(DIMS, st.integers(0, 2**32 - 1), SCALARS, DTYPES, st.booleans())
def test_state_is_a_plus_and_minus_f_d(
    ops: Backend, dim: int, seed: int, f: float, dtype: type, with_z: bool
) -> None:
    a, d = _arrays(seed, dim, 2)
    x, z = np.empty(dim, dtype), np.empty(dim, dtype)
    if with_z:
        ops.state(a, d, f, x, z)
    else:
        ops.state_x(a, d, f, x)
    assert x.tobytes() == (a + d * f).astype(dtype).tobytes()
    if with_z:
        assert z.tobytes() == (a - d * f).astype(dtype).tobytes()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(DIMS, st.integers(0, 2**32 - 1), SCALARS, SCALARS, DTYPES, DTYPES)
def test_flow_is_step_and_c_times_the_gap(
    ops: Backend, dim: int, seed: int, c: float, step: float, given_dtype: type, out_dtype: type
) -> None:
    v, w = _arrays(seed, dim, 2, given_dtype)
    dx, dz = np.empty(dim, out_dtype), np.empty(dim, out_dtype)
    assert ops.flow(v, w, c, step, dx, dz)
    gap = w.astype(np.float64) - v.astype(np.float64)
    assert dx.tobytes() == (step * gap).astype(out_dtype).tobytes()
    assert dz.tobytes() == (c * gap).astype(out_dtype).tobytes()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(DIMS, st.integers(0, 2**32 - 1), SCALARS, SCALARS, SCALARS, DTYPES)
def test_the_servers_flow_is_the_flow_to_its_state(
    ops: Backend, dim: int, seed: int, f: float, c: float, step: float, dtype: type
) -> None:
    a, d = _arrays(seed, dim, 2)
    (v,) = _arrays(seed + 1, dim, 1, dtype)
    dx, dz = np.empty(dim, dtype), np.empty(dim, dtype)
    assert ops.state_flow((a, d), f, v, c, step, dx, dz)
    gap = (a + d * f) - v.astype(np.float64)
    assert dx.tobytes() == (step * gap).astype(dtype).tobytes()
    assert dz.tobytes() == (c * gap).astype(dtype).tobytes()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(DIMS, st.integers(0, 2**32 - 1), SCALARS, SCALARS, DTYPES)
def test_booking_adds_the_half_parts_to_the_row_and_the_sums(
    ops: Backend, dim: int, seed: int, k_a: float, k_d: float, dtype: type
) -> None:
    dx, dz = _arrays(seed, dim, 2, dtype)
    rows = tuple(_arrays(seed + 1, dim, 4))
    before = [r.copy() for r in rows]
    a = (dx.astype(np.float64) + dz.astype(np.float64)) * k_a
    d = (dx.astype(np.float64) - dz.astype(np.float64)) * k_d
    scratch = (np.empty(dim), np.empty(dim))
    assert ops.book(dx, dz, k_a, k_d, rows, scratch)  # type: ignore[arg-type]
    for got, old, part in zip(rows, before, (a, a, d, d), strict=True):
        assert got.tobytes() == (old + part).tobytes()
    assert ops.half_parts(dx, dz, k_a, k_d, *scratch)
    assert scratch[0].tobytes() == a.tobytes()
    assert scratch[1].tobytes() == d.tobytes()


@pytest.mark.parametrize("bad", [np.inf, np.nan, 1.5e308])
def test_a_flow_that_is_or_overflows_to_non_finite_changes_nothing(
    ops: Backend, bad: float
) -> None:
    dim = 2 * BLOCK + 3
    dx, dz = np.ones(dim), np.ones(dim)
    dx[-1] = bad
    dz[-1] = bad  # 1.5e308 twice: their sum overflows
    rows = tuple(np.full(dim, 2.0) for _ in range(4))
    assert not ops.book(dx, dz, 0.5, 0.5, rows, (np.empty(dim), np.empty(dim)))  # type: ignore[arg-type]
    assert all(np.array_equal(r, np.full(dim, 2.0)) for r in rows)


def test_a_huge_but_finite_flow_is_booked_exactly(ops: Backend) -> None:
    """Past the compiled path's quick bound, the two-step way books it, and it is the same."""
    dim = BLOCK + 1
    dx, dz = np.full(dim, 1e307), np.full(dim, -1e307)
    rows = tuple(np.zeros(dim) for _ in range(4))
    assert ops.book(dx, dz, 0.5, 0.5, rows, (np.empty(dim), np.empty(dim)))  # type: ignore[arg-type]
    assert np.array_equal(rows[0], np.zeros(dim))
    assert np.array_equal(rows[2], np.full(dim, 1e307))


@pytest.mark.parametrize(
    ("bad", "one_pass"), [(np.inf, False), (np.nan, False), (3e38, True), (1.0, True)]
)
def test_a_float32_flow_goes_in_one_pass_if_every_value_is_finite(
    bad: float, one_pass: bool
) -> None:
    """float32 flows are checked by their finiteness alone: an inf or nan is caught, and finite
    values whose sum overflows (3e38, twice) are taken."""
    pytest.importorskip("numba")
    dim = arithmetic.COMPILED_MIN_DIM
    ops = arithmetic.for_size(dim)
    dx, dz = np.ones(dim, np.float32), np.ones(dim, np.float32)
    dx[-2:] = bad
    dz[7] = bad
    assert ops.one_pass(dx, dz, 0.5, -0.5) is one_pass
    # Factors so large that float32's largest could overflow: the loop's bound decides.
    assert ops.one_pass(dx, dz, 0.5, 1e300) is (bad == 1.0)
    assert numpy_blocks.one_pass(dx, dz, 0.5, -0.5) is False  # the blocks book at once


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(DIMS, DTYPES, st.data())
def test_all_finite_is_numpys_isfinite_all(
    ops: Backend, dim: int, dtype: type, data: st.DataObject
) -> None:
    """Any inf or nan, anywhere, alone or among others, and finite values whose sum overflows."""
    big = float(np.finfo(dtype).max)
    x = np.full(dim, data.draw(st.sampled_from([0.0, 1.0, -big, big])), dtype)
    bad = st.sampled_from([np.inf, -np.inf, np.nan])
    for _ in range(data.draw(st.integers(0, 3))):
        x[data.draw(st.integers(0, dim - 1))] = data.draw(bad)
    assert ops.all_finite(x) is bool(np.isfinite(x).all())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bad", [np.inf, np.nan, "overflow"])
def test_a_flow_says_when_a_value_it_wrote_is_not_finite(
    ops: Backend, dtype: type, bad: float | str
) -> None:
    """An inf or nan given, or a gap whose product overflows the outputs' dtype; whichever of
    ``c`` and ``step`` is the larger, and for the server's flow too."""
    dim = BLOCK + 3
    v, w = np.zeros(dim), np.zeros(dim)
    if bad == "overflow":  # finite gap, times 4 past the dtype's largest
        w[-1] = float(np.finfo(dtype).max) / 2
    else:
        v[5] = bad  # type: ignore[assignment]
    for c, step in ((4.0, 0.5), (0.5, 4.0)):
        dx, dz = np.empty(dim, dtype), np.empty(dim, dtype)
        assert not ops.flow(v, w, c, step, dx, dz)
        sums = (w.copy(), np.zeros(dim))
        assert not ops.state_flow(sums, 1.0, v.astype(dtype), c, step, dx, dz)
    assert ops.flow(v[:5], w[:5], 4.0, 0.5, dx[:5], dz[:5])  # before the bad value


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_flow_is_refused_exactly_when_a_stored_value_is_not_finite(
    ops: Backend, dtype: type
) -> None:
    """Gaps at the last values the outputs' dtype stores finitely and the first it does not
    (float32 rounds to nearest: halfway to 2**128 is already infinite): the flow's answer
    is what numpy finds in what it stored."""
    largest = float(np.finfo(dtype).max)
    edge = stored_below(np.dtype(dtype)) if dtype is np.float32 else largest
    with np.errstate(over="ignore"):  # float64's next after its largest is inf: a gap too
        gaps = [np.nextafter(edge, 0.0), edge, np.nextafter(edge, np.inf), -edge, largest]
    for gap in gaps:
        for c in (1.0, 1.0 + 2**-40):
            v, w = np.zeros(2), np.array([0.0, gap])
            dx, dz = np.empty(2, dtype), np.empty(2, dtype)
            with np.errstate(over="ignore"):
                stored = bool(np.isfinite(np.float64(gap) * c).all())
            said = ops.flow(v, w, c, 0.5, dx, dz)
            assert said is (bool(np.isfinite(dz).all()) and bool(np.isfinite(dx).all()))
            sums = (w.copy(), np.zeros(2))
            assert ops.state_flow(sums, 1.0, v.astype(dtype), c, 0.5, dx, dz) is said
            if dtype is np.float64:
                assert said is stored
