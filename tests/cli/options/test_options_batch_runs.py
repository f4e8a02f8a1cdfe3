"""The run options' checks: one message per bad value, whichever command was given it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.cli.options.batch_runs import check_count, check_positive
from continuized.gossip.errors import ConfigError


@given(minimum=st.integers(-5, 5), value=st.integers(-10, 10))
def test_check_count_refuses_exactly_the_values_below_the_minimum(minimum: int, value: int) -> None:
    if value >= minimum:
        check_count("--runs", value, minimum)
        return
    with pytest.raises(ConfigError) as caught:
        check_count("--runs", value, minimum)
    assert str(caught.value) == f"--runs must be an integer >= {minimum}, got {value}"


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_check_positive_accepts_exactly_the_finite_positive_numbers(value: float) -> None:
    if math.isfinite(value) and value > 0:
        check_positive("--eps", value)
        return
    with pytest.raises(ConfigError) as caught:
        check_positive("--eps", value)
    assert str(caught.value) == f"--eps must be a finite number > 0, got {value!r}"
