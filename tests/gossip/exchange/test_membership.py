"""Churn in the core: the settlement rule, view switches and admission, by sequential replay.

The oracle is the sums: after a leave the survivors' ``sum x`` and ``sum z`` must equal the
survivors' initial total exactly (to rounding) at every time, whatever the exchanges before;
after a join the total gains exactly the joiner's value. And the run must converge to that
mean, not to the old one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.gossip.errors import ConfigError, ProtocolError, TopologyError
from continuized.gossip.exchange.membership import (
    Admission,
    View,
    admit,
    attach_neighbors,
    carry_ledger,
    first_view,
    join_view,
    leave_view,
    make_view,
)
from continuized.gossip.model.jumps import Flow
from continuized.gossip.model.ledger import Ledger
from continuized.gossip.sim.churn import Change, ChurnRun, run_churn


def line(n: int) -> View:
    return first_view(n, [(i, i + 1) for i in range(n - 1)])


def grid(r: int, c: int) -> View:
    edges = [(i * c + j, i * c + j + 1) for i in range(r) for j in range(c - 1)]
    edges += [(i * c + j, (i + 1) * c + j) for i in range(r - 1) for j in range(c)]
    return first_view(r * c, edges)


def check_sums(run: ChurnRun, tol: float = 1e-9) -> None:
    for sx, sz, target in zip(run.sum_x, run.sum_z, run.target, strict=True):
        assert abs(sx - target) <= tol * max(1.0, abs(target))
        assert abs(sz - target) <= tol * max(1.0, abs(target))


def check_no_jump_mixes_views(run: ChurnRun) -> None:
    starts = [v.start for v in run.views] + [math.inf]
    for t, number, u, v in run.jumps:
        view = run.views[number]
        assert starts[number] <= t < starts[number + 1]
        assert (min(u, v), max(u, v)) in view.edges


@pytest.mark.parametrize(("make", "leaver"), [(lambda: line(8), 7), (lambda: grid(3, 3), 4)])
@pytest.mark.parametrize("seed", [0, 1])
def test_after_a_leave_the_survivors_converge_to_their_own_mean_exactly(
    make: object, leaver: int, seed: int
) -> None:
    view = make()  # type: ignore[operator]
    rng = np.random.default_rng(seed)
    values = rng.normal(size=len(view.members)).tolist()
    values[leaver] += 10.0  # the leaver's value is far from the rest: its loss must show
    run = run_churn(view, values, [Change("leave", 40.0, leaver)], 6000.0, rng, range(0, 6001, 50))
    check_sums(run)
    check_no_jump_mixes_views(run)
    survivors = [x for i, x in enumerate(values) if i != leaver]
    assert run.target[-1] == pytest.approx(math.fsum(survivors), abs=1e-12)
    assert run.members[-1] == len(view.members) - 1
    assert run.error[-1] <= 1e-6  # converged to the survivors' mean
    assert sum(1 for j in run.jumps if j[1] == 0) > 20  # exchanges happened before the leave
    assert run.views[1].eta != run.views[0].eta  # parameters recomputed for the new graph


def test_a_join_moves_the_mean_to_include_the_new_value() -> None:
    view = line(6)
    rng = np.random.default_rng(3)
    values = rng.normal(size=6).tolist()
    join = Change("join", 30.0, 6, value=25.0, neighbors=(2, 5))
    run = run_churn(view, values, [join], 6000.0, rng, range(0, 6001, 50))
    check_sums(run)
    check_no_jump_mixes_views(run)
    assert run.target[-1] == pytest.approx(math.fsum(values) + 25.0, abs=1e-12)
    assert run.error[-1] <= 1e-6
    mean = (math.fsum(values) + 25.0) / 7
    x6, _ = run.ledgers[6].state_values(6000.0)
    assert x6[0] == pytest.approx(mean, abs=1e-3)


def test_leave_then_join_with_eta_changing_twice() -> None:
    view = grid(3, 3)
    rng = np.random.default_rng(5)
    values = rng.normal(size=9).tolist()
    changes = [Change("leave", 20.0, 0), Change("join", 60.0, 9, value=-4.0, neighbors=(1, 3))]
    run = run_churn(view, values, changes, 2000.0, rng, range(0, 2001, 25))
    check_sums(run)
    check_no_jump_mixes_views(run)
    assert [v.number for v in run.views] == [0, 1, 2]
    assert run.target[-1] == pytest.approx(math.fsum(values[1:]) - 4.0, abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(4, 9),
    chords=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), max_size=6),
    leaver_index=st.integers(0, 8),
    t_leave=st.floats(1.0, 60.0),
    seed=st.integers(0, 2**16),
)
def test_survivors_sums_are_exact_after_any_leave_amid_random_exchanges(
    n: int, chords: list[tuple[int, int]], leaver_index: int, t_leave: float, seed: int
) -> None:
    """A cycle with chords: removing any one node leaves it connected."""
    edges = [(i, (i + 1) % n) for i in range(n)] + [(a % n, b % n) for a, b in chords]
    view = first_view(n, [e for e in edges if e[0] != e[1]])
    rng = np.random.default_rng(seed)
    values = rng.normal(scale=5.0, size=n).tolist()
    leaver = leaver_index % n
    grid_times = np.linspace(0.0, t_leave + 100.0, 30)
    run = run_churn(
        view, values, [Change("leave", t_leave, leaver)], t_leave + 100.0, rng, grid_times
    )
    check_sums(run)
    check_no_jump_mixes_views(run)


def test_dropping_only_x_would_break_the_survivors_sum() -> None:
    """Why the z part of the row goes with the x part: ARG's mixing keeps x + z per node, so
    a z imbalance leaks into x. The full rule passes (above); this variant must fail."""
    view = line(4)
    rng = np.random.default_rng(0)
    run = run_churn(view, [3.0, 0.0, 1.0, -2.0], [], 30.0, rng, [30.0])
    ledger = run.ledgers[2]
    k = view.edge_index(2, 3)
    total = ledger.edge_total(k, 30.0)
    ledger.set_edge_total(k, Flow(np.zeros(1), total.dz), 30.0)  # drop x only
    later = 30.0 + 5.0 / view.eta
    survivors_x = sum(run.ledgers[m].state_values(later)[0][0] for m in (0, 1, 2))
    assert abs(survivors_x - 4.0) > 1e-3


def test_a_late_flow_of_the_old_view_is_exact_on_a_kept_edge_and_rejected_on_a_settled_one() -> (
    None
):
    old = line(4)
    new = leave_view(old, 3, 10.0)
    # Node 1 on edge {1, 2}: apply a flow at T = 7 before the switch (reference) ...
    k_old = old.edge_index(1, 2)
    flow = Flow(np.array([0.3]), np.array([-1.1]))
    on_time = Ledger([1.0], [k for k, _ in old.incident(1)], old.eta)
    on_time.add(k_old, flow, 7.0)
    ref, _ = carry_ledger(on_time, old, new, 1)
    # ... or after it, through the switch.
    late = Ledger([1.0], [k for k, _ in old.incident(1)], old.eta)
    carried, switch = carry_ledger(late, old, new, 1)
    k_new, moved, t_add = switch.late_flow(1, 2, flow, 7.0)
    carried.add(k_new, moved, t_add)
    for t in (10.0, 50.0, 400.0):
        np.testing.assert_allclose(carried.state(t), ref.state(t), rtol=0, atol=1e-12)
    # Node 2's edge to the leaver is settled: a late flow on it is refused.
    ledger2 = Ledger([0.0], [k for k, _ in old.incident(2)], old.eta)
    _, switch2 = carry_ledger(ledger2, old, new, 2)
    with pytest.raises(ProtocolError, match="settled"):
        switch2.late_flow(2, 3, flow, 7.0)
    with pytest.raises(ProtocolError, match="not of view 0"):
        switch.late_flow(1, 2, flow, 12.0)


def test_carry_keeps_the_state_at_the_switch_minus_the_settled_rows() -> None:
    old = line(5)
    rng = np.random.default_rng(1)
    run = run_churn(old, rng.normal(size=5).tolist(), [], 40.0, rng, [40.0])
    new = leave_view(old, 4, 40.0)
    ledger = run.ledgers[3]
    dropped = ledger.edge_total(old.edge_index(3, 4), 40.0)
    carried, _ = carry_ledger(ledger, old, new, 3)
    x_old, z_old = ledger.state(40.0)
    x_new, z_new = carried.state(40.0)
    np.testing.assert_allclose(x_new, x_old - dropped.dx, atol=1e-12)
    np.testing.assert_allclose(z_new, z_old - dropped.dz, atol=1e-12)
    assert carried.eta == new.eta


def test_admission_never_lets_a_jump_mix_two_views() -> None:
    v0 = line(4)
    v1 = leave_view(v0, 3, 10.0)
    assert admit(v0, None, 0, 12.0) is Admission.SERVE  # next view not announced yet
    assert admit(v0, v1, 0, 9.0) is Admission.SERVE
    assert admit(v0, v1, 0, 10.0) is Admission.REFUSE  # T is in view 1's interval
    assert admit(v0, v1, 1, 10.5) is Admission.SWITCH
    assert admit(v0, v1, 1, 9.5) is Admission.REFUSE
    assert admit(v1, None, 0, 9.0) is Admission.REFUSE  # the initiator is behind: retries
    assert admit(v0, None, 1, 12.0) is Admission.REFUSE  # not told of view 1 yet


def test_views_refuse_what_cannot_work() -> None:
    v0 = line(5)
    with pytest.raises(TopologyError, match="disconnected"):
        leave_view(v0, 2, 1.0)  # the middle of a line
    with pytest.raises(ConfigError, match="not a member"):
        leave_view(v0, 9, 1.0)
    with pytest.raises(ConfigError, match="start after"):
        leave_view(v0, 4, 0.0)
    with pytest.raises(ConfigError, match="already a member"):
        join_view(v0, 1, [0], 1.0)
    with pytest.raises(ConfigError, match="neighbour"):
        join_view(v0, 7, [8], 1.0)
    with pytest.raises(TopologyError, match="non-members"):
        make_view(0, 0.0, [0, 1], [(0, 2)])
    with pytest.raises(ConfigError, match="does not follow"):
        carry_ledger(Ledger([0.0], [0], v0.eta), v0, v0, 0)
    picked = attach_neighbors(v0, 2, np.random.default_rng(0))
    assert len(set(picked)) == 2
    assert set(picked) <= set(v0.members)


def test_view_quantities_match_the_reference_line() -> None:
    """SPEC section 2: line of 30 nodes, theta_ARG = 2.552e-3; a leave at an end gives a line
    of 29 with its own, larger, rate."""
    v0 = line(30)
    assert v0.eta == pytest.approx(2.552e-3, rel=1e-3)
    v1 = leave_view(v0, 29, 1.0)
    assert v1.eta > v0.eta
    assert len(v1.members) == 29
    assert v1.as_dict()["number"] == 1


def test_edges_keep_their_ids_across_views_and_new_ones_are_never_reused() -> None:
    v0 = line(4)  # edges (0,1) (1,2) (2,3): ids 0, 1, 2 as at bootstrap
    assert v0.ids == (0, 1, 2)
    v1 = leave_view(v0, 3, 1.0)
    assert v1.ids == (0, 1)
    v2 = join_view(v1, 7, [0, 2], 2.0)
    assert v2.edge_index(0, 1) == 0
    assert v2.edge_index(1, 2) == 1
    assert sorted([v2.edge_index(0, 7), v2.edge_index(2, 7)]) == [3, 4]  # 2 was the leaver's


def test_a_view_goes_through_its_dict_and_a_bad_one_is_refused() -> None:
    from continuized.gossip.exchange.membership import view_from_dict

    v1 = join_view(leave_view(line(5), 4, 1.0), 9, [0, 3], 2.0)
    assert view_from_dict(v1.as_dict()) == v1
    bad = {**v1.as_dict(), "ids": [0]}
    with pytest.raises(ProtocolError, match="must match"):
        view_from_dict(bad)
    with pytest.raises(ProtocolError, match="malformed"):
        view_from_dict({"number": 1})
