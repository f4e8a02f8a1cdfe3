"""Exchanges of a model's parameters: the lazy booking a large model's ledger does gives the
same ledgers, to the bit, as booking every flow at once."""

from __future__ import annotations

import numpy as np
import pytest

from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.vocabulary import Link, TimeBase
from continuized.gossip.model import arithmetic
from continuized.gossip.model.parameters import ParameterLedger


def _run(dtype: type, settle: bool) -> tuple[list[np.ndarray], int]:
    """Node 1 asks node 0 forty times on one edge; returns both nodes' x, z and edge totals at
    the end, and how many bookings were left for later."""
    rng = np.random.default_rng(5)
    dim = 33
    ledgers = [ParameterLedger(rng.standard_normal(dim).astype(dtype), [0], eta=0.4) for _ in "ab"]
    server, client = (
        Exchanger(node, [Link(0, 1 - node, 1.0)], ledgers[node], 2.0, TimeBase(0.0, 1.0))
        for node in (0, 1)
    )
    now, lazy = 0.0, 0
    for _ in range(40):
        now += float(rng.exponential(0.3))
        out = client.initiate(0, now)
        assert out is not None
        if settle:
            client.settle()  # as a node does once the request is sent
        answer = server.receive(out.frame, now + 0.01, b"route")
        assert answer
        lazy += ledgers[0]._deferred is not None
        if settle:
            server.settle()
        client.receive(answer, now + 0.02)
        lazy += ledgers[1]._deferred is not None
        if rng.random() < 0.3:
            ledgers[1].add_local(rng.standard_normal(dim) * 0.1)
    assert client.counters.rejected == client.counters.failed == 0
    t = now + 0.05
    out: list[np.ndarray] = []
    for ledger in ledgers:
        out += [*ledger.state_values(t), *ledger.edge_total(0, t)]
    return out, lazy


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("settle", [True, False])
def test_a_lazily_booked_exchange_leaves_the_ledgers_of_one_booked_at_once(
    monkeypatch: pytest.MonkeyPatch, dtype: type, settle: bool
) -> None:
    pytest.importorskip("numba")
    monkeypatch.setattr(arithmetic, "COMPILED_MIN_DIM", 1 << 62)  # the NumPy blocks, at once
    at_once, none = _run(dtype, settle)
    assert none == 0
    monkeypatch.setattr(arithmetic, "COMPILED_MIN_DIM", 1)  # the numba loops: lazily
    lazily, deferred = _run(dtype, settle)
    assert deferred > 0
    for got, want in zip(lazily, at_once, strict=True):
        np.testing.assert_array_equal(got, want)
    # The edge's two ends booked opposite flows: the jumps moved no x out of the pair.
    np.testing.assert_array_equal(lazily[2], -lazily[6])
