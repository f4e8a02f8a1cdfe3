"""The warm-up runs the live exchange path to the end, and leaves nothing behind."""

from __future__ import annotations

import pytest

from continuized.gossip.exchange.exchanger import Exchanger
from continuized.gossip.exchange.vocabulary import Counters, Link, TimeBase
from continuized.gossip.model.ledger import Ledger
from continuized.node.warmup import WARM_UP_DIM, WARM_UP_EXCHANGES, warm_up


@pytest.mark.parametrize("dim", [1, 4, 4810])
def test_every_warm_up_exchange_completes_in_both_roles(
    dim: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Exchanger] = []
    original = Exchanger.__init__

    def recording(self: Exchanger, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(self)

    monkeypatch.setattr(Exchanger, "__init__", recording)
    assert warm_up(dim) == WARM_UP_EXCHANGES
    # Of the node's dimension, up to a cap: a model's thousands of parameters cost seconds.
    assert [end.ledger.dim for end in made] == [min(dim, WARM_UP_DIM)] * 2
    # Each end initiated half and served half: both sides of the path ran.
    for end in made:
        assert end.counters.initiated == end.counters.served == WARM_UP_EXCHANGES // 2
        assert end.counters.rejected == end.counters.refused == 0
        assert end.pending == 0
        assert not end.engaged
    # Mass is conserved across the throwaway pair, as in any exchange.
    t = WARM_UP_EXCHANGES + 1.0
    total = sum(end.ledger.state_values(t)[0][0] for end in made)
    assert total == pytest.approx(1.0)  # 0 and 1 to start with


def test_a_node_after_the_warm_up_is_what_it_would_have_been() -> None:
    def fresh() -> tuple[Exchanger, Exchanger]:
        timebase = TimeBase(0.0, 1.0)
        return tuple(  # type: ignore[return-value]
            Exchanger(v, [Link(0, 1 - v, 1.0)], Ledger([float(v)], [0], eta=0.01), 0.3, timebase)
            for v in (0, 1)
        )

    def run(pair: tuple[Exchanger, Exchanger]) -> tuple[list[float], Counters]:
        a, b = pair
        for i in range(20):
            out = a.initiate(0, 2.0 + i)
            assert out is not None
            a.receive(b.receive(out.frame, 2.1 + i, b"r") or b"", 2.2 + i)
        return a.ledger.state_values(30.0)[0] + b.ledger.state_values(30.0)[0], a.counters

    before = run(fresh())
    warm_up(1)
    assert run(fresh()) == before


def test_an_optimization_node_answers_its_first_y_before_t_0() -> None:
    # The dual y starts at 0: the warm-up asks each problem for grad f^*(0), the slow first
    # answer (Newton from no previous one), and the answer is the one a node would compute.
    import numpy as np

    from continuized.gossip.datasets import load_node_shard
    from continuized.gossip.problems import make_local_problem

    shard = load_node_shard("breast-cancer", "iid:0", 8, 3)
    warmed, cold = (make_local_problem("logistic:0.01", shard) for _ in range(2))
    asked: list[list[float]] = []
    answer = warmed.grad_conjugate

    def recording(y: np.ndarray) -> np.ndarray:
        asked.append(np.asarray(y).tolist())
        return answer(y)

    warmed.grad_conjugate = recording  # type: ignore[method-assign]
    warm_up(shard.dim, exchanges=2, problems=[warmed])
    assert asked == [[0.0] * shard.dim]
    steps = warmed._fast.newton_steps
    assert steps >= 3  # from zero: the slow one
    first = cold.grad_conjugate(np.zeros(shard.dim))
    assert np.array_equal(warmed.grad_conjugate(np.zeros(shard.dim)), first)
    assert warmed._fast.newton_steps == steps  # the same y again: no step needed
