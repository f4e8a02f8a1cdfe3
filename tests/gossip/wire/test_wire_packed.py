"""A model's parameters in a JSON report (gossip.wire.checks.pack): bit for bit, and checked."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from continuized.gossip.errors import ProtocolError
from continuized.gossip.wire.checks import BYTES_PER_PACKED, pack, unpacked

finite64 = arrays(
    np.float64, st.integers(1, 64), elements=st.floats(allow_nan=False, allow_infinity=False)
)
finite32 = arrays(
    np.float32,
    st.integers(1, 64),
    elements=st.floats(width=32, allow_nan=False, allow_infinity=False),
)


@given(st.one_of(finite64, finite32))
def test_a_packed_vector_comes_back_bit_for_bit_in_float64(values: np.ndarray) -> None:
    text = json.loads(json.dumps(pack(values)))  # through a JSON document
    back = unpacked("x", text, values.size)
    assert back.dtype == np.float64
    assert back.tobytes() == values.astype(np.float64).tobytes()


def test_a_packed_vector_takes_its_bytes_in_base64_less_than_half_a_json_list() -> None:
    values = np.random.default_rng(0).standard_normal(3_000) * 0.05
    text = pack(values)
    assert len(text) == pytest.approx(values.size * BYTES_PER_PACKED, abs=4)
    assert len(text) < 0.55 * len(json.dumps(values.tolist()))


@pytest.mark.parametrize(
    ("value", "dim", "error"),
    [
        ([0.5], None, "'x' must be base64 text, got list"),
        ("not base64!", None, "'x' is not valid base64"),
        ("", None, "'x' holds 0 bytes; valid: a non-empty multiple of 8"),
        (base64.b64encode(b"\0" * 12).decode(), None, "'x' holds 12 bytes"),
        (pack(np.zeros(3)), 4, "'x' has 3 components, expected 4"),
        (pack(np.array([0.0, np.inf])), None, r"'x'\[1\] must be finite, got inf"),
        (pack(np.array([np.nan])), None, r"'x'\[0\] must be finite, got nan"),
    ],
)
def test_a_bad_packed_vector_is_refused_naming_its_field(
    value: Any, dim: int | None, error: str
) -> None:
    with pytest.raises(ProtocolError, match=error):
        unpacked("x", value, dim)
