"""Algorithm parameters: the corrected ARG mixing rate (SPEC MISPRINT 1) and bad input."""

from __future__ import annotations

import math

import pytest

from continuized.gossip.errors import ConfigError
from continuized.gossip.model.algorithms import Algorithm, gossip_params, parse_algorithm


def test_arg_parameters_use_the_corrected_mixing_rate() -> None:
    p = gossip_params("arg", mu_gossip=3.778e-4, r_max=29.0)
    assert p.algorithm is Algorithm.ARG
    assert p.eta == pytest.approx(math.sqrt(3.778e-4 / (2 * 29.0)))
    # Not the paper's misprinted sqrt(2 mu / R_max), which is twice as large.
    assert p.eta == pytest.approx(0.5 * math.sqrt(2 * 3.778e-4 / 29.0))
    assert p.c == pytest.approx(1 / math.sqrt(2 * 3.778e-4 * 29.0))
    assert p.theta == p.eta
    assert p.bound_factor == 2.0


def test_rg_parameters() -> None:
    p = gossip_params(Algorithm.RG, mu_gossip=0.01, r_max=5.0)
    # The guaranteed rate is mu / 2: an activation removes (x_v - x_w)^2 / 2 of the squares.
    assert (p.eta, p.c, p.theta, p.bound_factor) == (0.0, 0.0, 0.005, 1.0)


def test_complete_graph_coupling_is_one_half() -> None:
    n = 10
    assert gossip_params("arg", 2.0 / (n - 1), n - 1.0).c == pytest.approx(0.5)


@pytest.mark.parametrize("name", ["RG", " arg ", "Arg"])
def test_algorithm_names_are_case_insensitive(name: str) -> None:
    assert parse_algorithm(name).value == name.strip().lower()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("nesterov", 0.1, 1.0), "unknown algorithm 'nesterov'; valid: rg, arg"),
        (("arg", 0.0, 1.0), "mu_gossip must be finite and > 0"),
        (("arg", float("nan"), 1.0), "mu_gossip must be finite and > 0"),
        (("arg", 0.1, -1.0), "R_max must be finite and > 0"),
        (("rg", 0.1, float("inf")), "R_max must be finite and > 0"),
    ],
)
def test_bad_parameters(args: tuple[str, float, float], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        gossip_params(*args)
    assert needle in str(info.value)


def test_the_algorithm_rule_names_only_real_algorithms() -> None:
    from continuized.gossip.dual.params import DualAlgorithm
    from continuized.gossip.model.algorithms import AVERAGING, OPTIMIZING

    assert set(AVERAGING) == {a.value for a in Algorithm}
    assert set(OPTIMIZING) == {a.value for a in DualAlgorithm}


@pytest.mark.parametrize(
    ("problem", "live", "valid"),
    [
        (False, False, ["arg", "rg"]),
        (False, True, ["arg", "rg"]),
        (True, False, ["acd", "cd", "dgd"]),
        (True, True, ["acd"]),
    ],
)
def test_every_task_runs_its_algorithms_and_refuses_the_others(
    problem: bool, live: bool, valid: list[str]
) -> None:
    from continuized.gossip.model.algorithms import AVERAGING, OPTIMIZING, check_algorithm

    assert check_algorithm("", problem=problem, live=live) == valid[0]
    for name in (*AVERAGING, *OPTIMIZING):
        if name in valid:
            assert check_algorithm(name.upper(), problem=problem, live=live) == name
            continue
        with pytest.raises(ConfigError) as info:
            check_algorithm(name, problem=problem, live=live)
        # Refused, naming the bad one and listing every valid one.
        assert f"--algorithm '{name}'" in str(info.value)
        assert str(info.value).endswith(f"valid: {', '.join(valid)}")
