"""The exchange's fast encode and check (gossip.wire.hot) agree with the schema's own."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from continuized.gossip.errors import ProtocolError
from continuized.gossip.wire.hot import FIELDS
from continuized.gossip.wire.schema import (
    MAX_DIM,
    MAX_INT,
    VERSION,
    Busy,
    Reply,
    Request,
    decode,
    encode,
)
from continuized.gossip.wire.schema.decoding import checked_message

HOT = {Request.TYPE: Request, Reply.TYPE: Reply, Busy.TYPE: Busy}

# Values a peer could put in any field: valid ones and each way of being wrong.
scalars = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([0, 1, MAX_INT, MAX_INT + 1, -1, True, False]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, float("inf"), float("nan"), -0.0]),
    st.none(),
    st.text(max_size=3),
)
vectors = st.one_of(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=4),
    st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=4),
    st.lists(st.sampled_from([1e308, 1.0, 2, True, None]), min_size=1, max_size=3),
    st.builds(lambda n: [0.5] * n, st.sampled_from([MAX_DIM, MAX_DIM + 1])),
)
values = st.one_of(scalars, vectors)


def _checked(kind: str, body: dict[str, Any]) -> Any:
    try:
        return checked_message(kind, dict(body))
    except ProtocolError:
        return None


def _valid(name: str) -> st.SearchStrategy[Any]:
    if name in ("src", "edge", "seq", "ack", "served"):
        return st.integers(0, MAX_INT)
    if name == "t":
        return st.floats(allow_nan=False, allow_infinity=False)
    return st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=3)


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A valid map of one of the three hot types, then a few of its fields replaced by
    anything, dropped, or one added."""
    kind = draw(st.sampled_from(sorted(HOT)))
    names = [f.name for f in dataclasses.fields(HOT[kind])]
    body = {name: draw(_valid(name)) for name in names}
    if kind == Reply.TYPE:
        body["dz"] = [0.5] * len(body["dx"])
    for name in draw(st.lists(st.sampled_from(names), max_size=2)):
        body[name] = draw(values)
    if draw(st.integers(0, 4)) == 0:
        del body[draw(st.sampled_from(names))]
    if draw(st.integers(0, 4)) == 0:
        body[draw(st.sampled_from(["extra", "v", "type"]))] = draw(values)
    return kind, body


@settings(max_examples=2000, deadline=None)
@given(bodies())
def test_the_fast_check_accepts_only_what_the_schema_accepts_and_agrees(
    case: tuple[str, dict[str, Any]],
) -> None:
    kind, body = case
    fast = FIELDS[kind](dict(body))
    slow = _checked(kind, body)
    if fast is not None:
        assert slow is not None, f"fast path accepted {body!r}, which the schema refuses"
        assert HOT[kind](*fast) == slow


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, MAX_INT),
    st.integers(0, MAX_INT),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.floats(-1e300, 1e300), min_size=1, max_size=5),
)
def test_every_message_a_node_sends_takes_the_fast_path_and_survives_it(
    seq: int, edge: int, t: float, u: list[float]
) -> None:
    sent = [
        Request(src=1, edge=edge, seq=seq, ack=0, t=t, u=tuple(u), z=tuple(u), served=seq),
        Request(src=1, edge=edge, seq=seq, ack=0, t=t, u=tuple(u)),
        Reply(src=2, edge=edge, seq=seq, t=t, dx=tuple(u), dz=tuple(u)),
        Busy(src=2, edge=edge, seq=seq, t=t),
    ]
    for message in sent:
        body = msgpack.unpackb(encode(message))
        # The frame holds exactly what the schema's generic encoder puts in it.
        plain = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
        expected = {"v": VERSION, "type": message.TYPE, **plain}
        assert body == {k: list(v) if isinstance(v, tuple) else v for k, v in expected.items()}
        del body["v"], body["type"]
        assert FIELDS[message.TYPE](body) is not None  # no detour through the schema
        assert decode(encode(message)) == message


_INF, _NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("t", _INF),
        ("t", _NAN),
        ("t", "1.0"),
        ("u", [1.0, _INF]),
        ("u", [_NAN, 1.0]),
        ("u", [1e308, 1e308]),  # finite, but its sum is not: left to the schema
        ("u", []),
        ("u", [0.5] * (MAX_DIM + 1)),
        ("u", (0.5,)),
        ("z", [_INF]),
        ("z", [1.0, True]),
        ("seq", -1),
        ("seq", MAX_INT + 1),
        ("seq", True),
        ("ack", 1.0),
        ("served", -1),
        ("served", MAX_INT + 1),
        ("served", None),
        ("extra", 1),
    ],
)
def test_the_fast_check_leaves_every_kind_of_doubt_to_the_schema(field: str, value: Any) -> None:
    body: dict[str, Any] = {
        "src": 1,
        "edge": 0,
        "seq": 3,
        "ack": 2,
        "t": 1.5,
        "u": [0.5],
        "z": None,
        "served": 0,
    }
    assert FIELDS["request"](dict(body)) is not None
    body[field] = value
    assert FIELDS["request"](body) is None


@pytest.mark.parametrize(
    ("kind", "change"),
    [
        ("reply", {"dx": [_INF]}),
        ("reply", {"dz": [_NAN]}),
        ("reply", {"dz": [0.5, 0.5]}),  # its length differs from dx's
        ("reply", {"t": _INF}),
        ("reply", {"wall": _NAN}),
        ("reply", {"wall": 7}),  # an int: the schema converts it
        ("reply", {"edge": -1}),
        ("reply", {"extra": 1}),
        ("busy", {"t": _NAN}),
        ("busy", {"src": True}),
        ("busy", {"extra": 0}),
    ],
)
def test_the_fast_check_of_answers_leaves_doubt_to_the_schema(
    kind: str, change: dict[str, Any]
) -> None:
    body: dict[str, Any] = {"src": 1, "edge": 0, "seq": 3, "t": 1.5}
    if kind == "reply":
        body.update(dx=[0.5], dz=[-0.5], wall=1.7e9)
    assert FIELDS[kind](dict(body)) is not None
    assert FIELDS[kind]({**body, **change}) is None


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [("t", 3, None), ("u", [1, 2.0], None), ("u", [float("inf")], "'u'[0]"), ("seq", -1, "seq")],
)
def test_what_the_fast_path_leaves_to_the_schema_gets_the_schema_answer(
    field: str, value: Any, named: str | None
) -> None:
    body = {"src": 1, "edge": 0, "seq": 3, "ack": 2, "t": 1.5, "u": [0.5], "z": None, "served": 1}
    body[field] = value
    assert FIELDS["request"](dict(body)) is None
    frame = msgpack.packb({"v": VERSION, "type": "request", **body})
    if named is None:  # an int where a float goes is converted, as the schema says
        assert isinstance(decode(frame), Request)
    else:
        with pytest.raises(ProtocolError, match=named.replace("[", r"\[")):
            decode(frame)
