"""Exact jumps by design: with the lock, the asynchronous protocol equals a sequential replay.

The oracle (:mod:`_exactnet`): exchangers joined by a fake network that delays and reorders
every frame at random (and drops and repeats some), with many exchanges overlapping. The
jumps read off the wire, replayed one after the other in T order with the core functions,
must give every node's ``(x, z)`` to 1e-9 at quiescence: for RG and ARG, and for a nonlinear
exchanged value with per-edge steps (the optimization case, SPEC section 6). Without the lock
the same schedules must be far off, so the test can fail.
"""

from __future__ import annotations

import numpy as np
import pytest
from _exactnet import ExactNet, Value
from hypothesis import given, settings
from hypothesis import strategies as st

GRAPHS = ["line:12", "grid:4x4"]


def run(net: ExactNet, drop: float = 0.0, dup: float = 0.0) -> tuple[float, float]:
    net.run(steps=1500, tick_share=0.3, drop=drop, dup=dup)  # ~450 ticks, ~2 events per hop
    net.quiesce(drop=drop, dup=dup)
    return net.gap()


@pytest.mark.parametrize("spec", GRAPHS)
@pytest.mark.parametrize("algorithm", ["arg", "rg"])
@pytest.mark.parametrize("seed", [0, 1])
def test_with_the_lock_the_nodes_equal_the_sequential_replay(
    spec: str, algorithm: str, seed: int
) -> None:
    net = ExactNet.build(spec, algorithm, seed)
    gap, spread = run(net)
    assert len(net.jumps) == net.ticks > 350  # every tick became one jump: none dropped
    assert net.total("waited") > 20  # ticks came while their node was engaged
    assert net.total("deferred") > 50  # requests came to engaged nodes and waited for them
    # Two nodes that asked each other at once: the higher id served the lower's request at
    # once, and the lower caught the higher's values up past that jump before serving it.
    assert net.total("crossed") > 10
    assert net.total("caught_up") > 5
    assert net.total("bounced") == net.total("refused")
    assert net.total("postponed") > 20  # requests behind the server's last jump moved to it
    assert spread > 1e-6  # not converged yet: the replay still tells schedules apart
    assert gap < 1e-9 * max(1.0, spread)
    # Every node's trace (gossip.exchange.trace) is the replay itself at its grid times, although
    # the samples were read while later jumps were still in flight.
    trace_gap, samples = net.trace_gap()
    last = max(when for when, _, _ in net.jumps)
    assert samples >= 0.8 * net.topo.n * last / 0.7  # nearly every node, up to its last jump
    assert trace_gap < 1e-9 * max(1.0, spread)


def tanh(y: np.ndarray) -> np.ndarray:
    return np.tanh(y)


def wavy(y: np.ndarray) -> np.ndarray:
    return y + 0.3 * np.sin(2.0 * y)  # slope in [0.4, 1.6]: nonlinear, stable with ARG's c


@pytest.mark.parametrize("value", [tanh, wavy], ids=["tanh", "wavy"])
@pytest.mark.parametrize("spec", GRAPHS)
def test_a_nonlinear_exchanged_value_with_per_edge_steps_is_exact_too(
    value: Value, spec: str
) -> None:
    """u = g(y) is private to each end and nonlinear: the server cannot compute it for the
    initiator, nor fix it up later. Both ends' values at one T are what makes it exact."""
    net = ExactNet.build(spec, "arg", 2, dim=2, value=value, steps=(0.05, 0.3), scale=0.5)
    gap, spread = run(net)
    assert len(net.jumps) == net.ticks > 350
    assert net.total("refused") > 20
    # Two nodes that asked each other at once: the higher id served the lower's request and
    # withdrew its own (gossip.exchange.crossing), which the lower id then refused if it came at
    # all.
    assert net.total("crossed") == net.total("withdrawn") > 10
    assert net.total("caught_up") == 0
    assert spread > 1e-6
    assert gap < 1e-9 * max(1.0, spread)
    free = ExactNet.build(
        spec, "arg", 2, dim=2, value=value, steps=(0.05, 0.3), scale=0.5, exclusive=False
    )
    free_gap, free_spread = run(free)
    assert free_gap > 0.05 * free_spread


@pytest.mark.parametrize("spec", GRAPHS)
@pytest.mark.parametrize("algorithm", ["arg", "rg"])
def test_without_the_lock_the_same_schedules_are_far_from_the_replay(
    spec: str, algorithm: str
) -> None:
    net = ExactNet.build(spec, algorithm, 0, exclusive=False)
    gap, spread = run(net)
    assert len(net.jumps) > 350
    assert net.total("refused") == net.total("waited") == 0
    assert gap > 0.1 * spread


@pytest.mark.parametrize("spec", GRAPHS)
@pytest.mark.parametrize("timeout", [100.0, 4.0], ids=["patient", "impatient"])
@pytest.mark.parametrize("value", [None, wavy], ids=["gossip", "wavy"])
def test_drops_duplicates_and_retries_keep_mass_and_exactness(
    spec: str, timeout: float, value: Value | None
) -> None:
    """Requests and answers are lost and repeated; retries re-send the same frames, repeats
    are answered from the caches (a Busy too): the sums always hold. With timeouts long
    enough that no lock is released, the replay holds too; with short ones, stuck exchanges
    release their node's lock (counted), and only the sums are guaranteed: a withdrawn
    request (a nonlinear exchanged value, gossip.exchange.crossing) is never served, even then."""
    net = ExactNet.build(
        spec, "arg", 0, timeout=timeout, value=value, scale=1.0 if value is None else 0.5
    )
    gap, spread = run(net, drop=0.03, dup=0.1)
    assert net.total("retried") > 10
    assert net.total("duplicates") > 10
    assert net.total("failed") == 0
    assert len(net.jumps) == net.ticks - net.total("skipped")
    t_end = net.now + 1.0
    x, z = net.states(t_end)
    scale = float(np.abs(net.initial).sum() + np.abs(x).sum())
    np.testing.assert_allclose(x.sum(axis=0), net.initial.sum(axis=0), rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(z.sum(axis=0), net.initial.sum(axis=0), rtol=0, atol=1e-12 * scale)
    if timeout > 10:
        assert net.total("released") == net.total("skipped") == 0
        assert gap < 1e-9 * max(1.0, spread)
    else:
        assert net.total("released") > 0


@given(
    seed=st.integers(0, 2**32 - 1),
    spec=st.sampled_from(["line:4", "cycle:5", "star:5", "complete:4"]),
    tick_share=st.floats(0.1, 0.9),
    steps=st.integers(1, 300),
    value=st.sampled_from([None, wavy]),
)
@settings(max_examples=80, deadline=None)
def test_every_tick_is_served_without_deadlock_or_starvation(
    seed: int, spec: str, tick_share: float, steps: int, value: Value | None
) -> None:
    """Random schedules, however contended (a star's centre, a complete graph): the network
    always settles, every tick becomes exactly one jump, refusals stay bounded, and the nodes
    equal the sequential replay of those jumps (requests crossed, caught up and moved too; with
    a nonlinear exchanged value, crossed and withdrawn)."""
    net = ExactNet.build(spec, "arg", seed, value=value)
    net.rng = np.random.default_rng(seed)
    net.run(steps, tick_share)
    net.quiesce()
    assert len(net.jumps) == net.ticks  # none lost, none starved
    assert net.total("skipped") == net.total("failed") == 0
    assert net.total("served") == net.ticks
    assert all(not n.engaged and not n.pending and not n.waiting for n in net.nodes.values())
    assert net.total("bounced") <= 10 * max(net.ticks, 1)
    gap, spread = net.gap()
    assert gap < 1e-9 * max(1.0, spread)
