"""The array ledger of a model's parameters agrees with the list ledger, and takes local steps."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError
from continuized.gossip.model.jumps import edge_flow_values
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.model.parameters import ParameterLedger


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.0, 3.0), st.integers(1, 40))
def test_the_array_ledger_holds_the_same_state_as_the_list_ledger(
    seed: int, eta: float, jumps: int
) -> None:
    rng = np.random.default_rng(seed)
    dim = 5
    x0 = rng.standard_normal(dim)
    lists, arrays = Ledger(x0, [3, 8], eta), ParameterLedger(x0, [3, 8], eta)
    t = 0.0
    for _ in range(jumps):
        t += float(rng.exponential(0.7))
        edge = int(rng.choice([3, 8]))
        dx, dz = rng.standard_normal(dim), rng.standard_normal(dim)
        when = t - float(rng.exponential(0.3))  # a late flow, as the exchange books them
        lists.add_values(edge, dx.tolist(), dz.tolist(), when)
        arrays.add_values(edge, dx, dz, when, sign=1.0)
        for got, want in zip(arrays.state_values(t), lists.state_values(t), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    for edge in (3, 8):
        np.testing.assert_allclose(arrays.edge_total(edge, t).dx, lists.edge_total(edge, t).dx)


def test_a_gradient_step_moves_x_and_z_alike_and_never_the_edges() -> None:
    a = ParameterLedger(np.zeros(4), [0], eta=0.8)
    b = ParameterLedger(np.ones(4), [0], eta=0.8)
    xa, _ = a.state_values(0.5)
    xb, _ = b.state_values(0.5)
    dx, dz = edge_flow_values(xa, xb, c=1.7)
    a.add_values(0, dx, dz, 0.5)
    b.add_values(0, dx, dz, 0.5, sign=-1.0)
    before = [led.state_values(2.0) for led in (a, b)]
    a.add_local(np.full(4, 0.25))
    xa2, za2 = a.state_values(2.0)
    np.testing.assert_allclose(xa2, before[0][0] - 0.25)
    np.testing.assert_allclose(za2, before[0][1] - 0.25)
    # The jump conserved the sum of x; the step moved it by exactly the step.
    total = a.state_values(7.0)[0] + b.state_values(7.0)[0]
    np.testing.assert_allclose(total, np.ones(4) - 0.25, atol=1e-12)
    np.testing.assert_allclose(a.edge_total(0, 7.0).dx, -b.edge_total(0, 7.0).dx)
    with pytest.raises(ConfigError, match="4 finite numbers, got shape"):
        a.add_local(np.ones(3))


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.0, 2.0), st.floats(0.0, 3.0))
def test_float32_frames_keep_the_sum_of_x_as_exactly_as_float64_ones(
    seed: int, eta: float, c: float
) -> None:
    """Two float32 ledgers exchange float32 values and flows; their sums stay float64, and both
    book the one rounded flow the server sends, so the jumps conserve the sum of x."""
    rng = np.random.default_rng(seed)
    dim = 50
    v = ParameterLedger(rng.standard_normal(dim).astype(np.float32), [0], eta)
    w = ParameterLedger(rng.standard_normal(dim).astype(np.float32), [0], eta)
    start = v.state_values(0.0)[0] + w.state_values(0.0)[0]
    t = 0.0
    for _ in range(20):
        t += float(rng.exponential(0.5))
        x_v, z_v = v.wire_state(t)  # the request's u and z
        assert x_v.dtype == z_v.dtype == np.float32
        dx, dz = w.flow_values(x_v, w.x_values(t), c)  # the server's reply, float32
        assert dx.dtype == dz.dtype == np.float32
        w.add_values(0, dx, dz, t, sign=-1.0)
        v.add_values(0, dx, dz, t)
    total = v.state_values(t)[0] + w.state_values(t)[0]
    mixed = ParameterLedger(start, [], eta).state_values(t)[0]  # the sum only mixes
    np.testing.assert_allclose(total, mixed, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(v.edge_total(0, t).dx, -w.edge_total(0, t).dx)


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The numba loops at every size, so a small ledger books lazily as a model's does."""
    from continuized.gossip.model import arithmetic

    pytest.importorskip("numba")
    monkeypatch.setattr(arithmetic, "COMPILED_MIN_DIM", 1)
    assert arithmetic.for_size(1) is not arithmetic.numpy_blocks


def _frozen(array: np.ndarray) -> np.ndarray:
    """A read-only copy, as a received frame's array is: the ledger may book it lazily."""
    out = array.copy()
    out.flags.writeable = False
    return out


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.integers(0, 2**32 - 1), st.sampled_from([np.float32, np.float64]))
def test_a_lazy_booking_leaves_the_ledger_the_same_to_the_bit(
    compiled: None, seed: int, dtype: type
) -> None:
    """One ledger gets read-only flows (booked lazily), its twin writable ones (booked at
    once); whatever is read between the bookings, in whatever order, is the same to the bit,
    across rebases (a long gap in t) and gradient steps."""
    rng = np.random.default_rng(seed)
    dim, eta = 9, 0.7
    x0 = rng.standard_normal(dim).astype(dtype)
    lazy, eager = ParameterLedger(x0, [3, 8], eta), ParameterLedger(x0, [3, 8], eta)
    t, deferred = 0.0, 0
    for _ in range(40):
        t += float(rng.exponential(0.5)) * (6.0 if rng.random() < 0.1 else 1.0)
        edge = int(rng.choice([3, 8]))
        dx, dz = (rng.standard_normal(dim).astype(dtype) for _ in range(2))
        sign = float(rng.choice([-1.0, 1.0]))
        # finite=True (a decoded frame's): the same bookings, without the check's read
        finite = bool(rng.random() < 0.5)
        lazy.add_values(edge, _frozen(dx), _frozen(dz), t, sign=sign, finite=finite)
        eager.add_values(edge, dx, dz, t, sign=sign)
        deferred += lazy._deferred is not None
        read = int(rng.integers(0, 6))
        if read == 0:  # twice: a state read while a booking waits must not book it
            pairs = [(lazy.wire_state(t), eager.wire_state(t)) for _ in range(2)]
        elif read == 1:
            u = rng.standard_normal(dim).astype(dtype)
            pairs = [(lazy.flow_at(u, t, 1.5), eager.flow_at(u, t, 1.5))]
        elif read == 2:
            pairs = [((lazy.x_values(t),), (eager.x_values(t),))]
        elif read == 3:
            step = rng.standard_normal(dim)
            lazy.add_local(step)
            eager.add_local(step)
            pairs = []
        elif read == 4:
            pairs = [(tuple(lazy.edge_total(edge, t)), tuple(eager.edge_total(edge, t)))]
        else:
            lazy.settle()
            pairs = []
        for got, want in pairs:
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, w)
    assert deferred > 0  # the lazy path was taken
    for g, w in zip(lazy.state_values(t), eager.state_values(t), strict=True):
        np.testing.assert_array_equal(g, w)
    for edge in (3, 8):
        for g, w in zip(lazy.edge_total(edge, t), eager.edge_total(edge, t), strict=True):
            np.testing.assert_array_equal(g, w)


def test_a_flow_the_caller_may_still_write_is_booked_at_once(compiled: None) -> None:
    a = ParameterLedger(np.zeros(3), [0], eta=0.5)
    dx, dz = np.ones(3), np.ones(3)
    a.add_values(0, dx, dz, 0.0)
    dx[:] = 100.0  # the caller's own array, written after the call: not the ledger's business
    assert a._deferred is None
    assert a.state_values(0.0)[0].tolist() == [1.0, 1.0, 1.0]


def test_a_flow_the_ledger_computed_is_read_only_until_its_pool_hands_it_out_again(
    compiled: None,
) -> None:
    a = ParameterLedger(np.zeros(3, dtype=np.float32), [0], eta=0.5)
    dx, dz = a.flow_at(np.ones(3, dtype=np.float32), 0.0, 1.0)
    assert not dx.flags.writeable
    assert not dz.flags.writeable
    a.add_values(0, dx, dz, 0.0, sign=-1.0)  # the server's own booking: deferred
    assert a._deferred is not None
    kept = id(dx)
    del dx, dz
    a.settle()
    again = a.flow_at(np.ones(3, dtype=np.float32), 0.0, 1.0)[0]
    assert id(again) == kept  # the same array, handed out anew, then made read-only again
    assert not again.flags.writeable
    assert a._wire_pool.take().flags.writeable


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_flow_that_overflows_the_frames_dtype_is_refused_by_the_ledger_that_computes_it(
    compiled: None, dtype: type
) -> None:
    """A peer's finite x far from ours: the gap times c is past the largest float32 (or
    float64). The server refuses before anything is booked, so no jump is half made."""
    a = ParameterLedger(np.zeros(4, dtype=dtype), [0], eta=0.5)
    before = [v.copy() for v in a.state_values(1.0)]
    far = np.zeros(4, dtype=dtype)
    far[2] = -float(np.finfo(dtype).max) / 2
    with pytest.raises(ConfigError, match=r"flow at t=1.0 is not finite \(c=4.0\)"):
        a.flow_at(far, 1.0, 4.0)
    with pytest.raises(ConfigError, match=r"not finite \(c=4.0\)"):
        a.flow_values(far, np.zeros(4, dtype=dtype), 4.0)
    for got, want in zip(a.state_values(1.0), before, strict=True):
        np.testing.assert_array_equal(got, want)
    dx, dz = a.flow_at(far / 8, 1.0, 4.0)  # within range: computed, and finite
    assert np.isfinite(dx).all()
    assert np.isfinite(dz).all()
