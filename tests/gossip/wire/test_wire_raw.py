"""A model's parameters on the wire: raw float64 parts beside the msgpack map, no float lists."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from continuized.gossip.errors import LocalError, ProtocolError
from continuized.gossip.wire.schema import (
    MAX_RAW_DIM,
    RAW_EXT,
    Reply,
    Request,
    decode,
    encode,
    encode_bytes,
    frame_size,
)


def _request(u: np.ndarray, z: np.ndarray | None) -> Request:
    return Request(src=1, edge=0, seq=7, ack=6, t=2.5, u=u, z=z, served=3)


@given(st.integers(1, 3000), st.integers(0, 2**32 - 1), st.booleans())
def test_array_values_round_trip_exactly_as_raw_parts(dim: int, seed: int, with_z: bool) -> None:
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(dim) * 10.0 ** rng.integers(-300, 300)
    z = rng.standard_normal(dim) if with_z else None
    frame = encode(_request(u, z))
    assert isinstance(frame, tuple)
    assert len(frame) == (3 if with_z else 2)
    assert len(frame[0]) < 100  # the map holds indices, never the floats
    assert frame_size(frame) == len(frame[0]) + 8 * dim * (2 if with_z else 1)
    # The receiver sees its own copies of the parts (bytes off the socket).
    got = decode(tuple(bytes(part) for part in frame))
    assert isinstance(got, Request)
    assert isinstance(got.u, np.ndarray)
    assert got.u.tobytes() == u.tobytes()  # bit for bit
    assert (got.z is None) == (z is None)
    if z is not None:
        assert isinstance(got.z, np.ndarray)
        assert got.z.tobytes() == z.tobytes()
    assert (got.src, got.edge, got.seq, got.ack, got.t, got.served) == (1, 0, 7, 6, 2.5, 3)


def test_a_reply_with_array_flows_round_trips_and_tuples_stay_one_frame() -> None:
    dx, dz = np.linspace(-1.0, 1.0, 500), np.linspace(2.0, 3.0, 500)
    got = decode(encode(Reply(src=2, edge=4, seq=9, t=1.0, dx=dx, dz=dz)))
    assert isinstance(got, Reply)
    assert np.array_equal(np.asarray(got.dx), dx)
    assert np.array_equal(np.asarray(got.dz), dz)
    small = Reply(src=2, edge=4, seq=9, t=1.0, dx=(0.5,), dz=(1.5,))
    assert isinstance(encode(small), bytes)  # gossip's scalars: the path they always had
    assert decode(encode(small)) == small
    assert isinstance(encode_bytes(small), bytes)
    with pytest.raises(LocalError, match="multipart"):
        encode_bytes(Reply(src=2, edge=4, seq=9, t=1.0, dx=dx, dz=dz))


def test_a_reply_whose_raw_parts_differ_in_length_is_refused() -> None:
    frame = encode(Reply(src=2, edge=4, seq=9, t=1.0, dx=np.ones(4), dz=np.ones(5)))
    with pytest.raises(ProtocolError, match="'dz' has 5 components but 'dx' has 4"):
        decode(frame)


@pytest.mark.parametrize(
    ("parts", "match"),
    [
        ("nan", r"field 'u'\[2\] must be finite"),
        ("odd", "raw part 1 has 20 bytes; valid: a multiple of 8"),
        ("index", "names no raw part"),
        ("lonely", "extension 1 but has no raw parts"),
        ("many", "a multipart frame has a map and 1 to 2 raw parts, got 4 parts"),
    ],
)
def test_bad_raw_parts_are_refused_with_the_reason(parts: str, match: str) -> None:
    u = np.arange(1.0, 4.0)
    header, raw = encode(_request(u, None))
    frames: object
    if parts == "nan":
        bad = u.copy()
        bad[2] = np.nan
        frames = (header, bad.tobytes())
    elif parts == "odd":
        frames = (header, b"\0" * 20)
    elif parts == "index":
        body = msgpack.unpackb(header)
        body["u"] = msgpack.ExtType(RAW_EXT, bytes([2]))
        frames = (msgpack.packb(body), bytes(raw))
    elif parts == "lonely":
        frames = bytes(header)
    else:
        frames = (header, bytes(raw), bytes(raw), bytes(raw))
    with pytest.raises(ProtocolError, match=match):
        decode(frames)  # type: ignore[arg-type]


def test_a_raw_part_beyond_the_limit_is_refused_before_it_is_read() -> None:
    header, _ = encode(_request(np.ones(2), None))
    huge = memoryview(bytearray(8 * MAX_RAW_DIM + 8))
    with pytest.raises(ProtocolError, match="raw part 1 has"):
        decode((header, huge))


def test_float32_values_go_as_float32_parts_of_half_the_bytes() -> None:
    """A float32 model's frames: its arrays as they are, read back as float32, bit for bit."""
    u = np.linspace(-1.0, 1.0, 1000, dtype=np.float32)
    z = np.linspace(0.0, 2.0, 1000)  # float64 beside it: each part has its own dtype
    frame = encode(_request(u, z))
    assert isinstance(frame, tuple)
    assert [memoryview(p).nbytes for p in frame[1:]] == [4 * 1000, 8 * 1000]
    got = decode(tuple(bytes(part) for part in frame))
    assert isinstance(got, Request)
    assert isinstance(got.u, np.ndarray)
    assert isinstance(got.z, np.ndarray)
    assert got.u.dtype == np.float32
    assert got.u.tobytes() == u.tobytes()
    assert got.z.dtype == np.float64
    assert got.z.tobytes() == z.tobytes()
    reply = decode(encode(Reply(src=2, edge=4, seq=9, t=1.0, dx=u, dz=u)))
    assert isinstance(reply, Reply)
    assert isinstance(reply.dx, np.ndarray)
    assert reply.dx.dtype == np.float32


def test_a_float32_part_of_a_size_no_float32_has_is_refused() -> None:
    frame = encode(_request(np.ones(3, dtype=np.float32), None))
    assert isinstance(frame, tuple)
    with pytest.raises(ProtocolError, match=r"raw part 1 has 10 bytes; valid: a multiple of 4"):
        decode((frame[0], bytes(frame[1])[:10]))
    bad = np.ones(3, dtype=np.float32)
    bad[1] = np.inf
    with pytest.raises(ProtocolError, match=r"'u'\[1\] must be finite"):
        decode(encode(_request(bad, None)))


def test_a_decoded_raw_part_is_read_only_as_its_frozen_message() -> None:
    """Nothing can write a received array in place: a ledger may then book it lazily."""
    msg = Request(src=1, edge=0, seq=1, ack=0, t=1.0, u=np.ones(4), z=np.ones(4, np.float32))
    got = decode(tuple(bytearray(part) if i else part for i, part in enumerate(encode(msg))))
    assert isinstance(got, Request)
    assert isinstance(got.z, np.ndarray)
    for array in (got.u, got.z):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 2.0
