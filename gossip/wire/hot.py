"""The exchange's own messages, encoded and checked without the schema's generic machinery.

Every exchange sends a :class:`~gossip.wire.schema.Request` and gets a
:class:`~gossip.wire.schema.Reply` or a :class:`~gossip.wire.schema.Busy` back: two frames built and
two checked per exchange, on the path whose CPU sets how fast a live cluster can go.
:mod:`gossip.wire.schema` hands these three to the functions here first:

* ``body_builders(VERSION)[type](message)`` is the frame's map, written out field by field
  (a float vector goes as its tuple: msgpack packs it as the array the schema's encoder
  would build);
* ``FIELDS[type](body)`` checks the map by the schema's rules, inline, and returns the
  message's field values in order, or ``None`` for anything it does not accept at a glance:
  a missing or extra field, an int where a float goes, a vector too long, a value that is
  not finite or too large. The schema's checkers then decide, so every error still names its
  field, and what the fast path accepts is exactly what the schema accepts (a test checks
  the two against each other on random maps).

The rules are :mod:`gossip.wire.schema`'s; this module only spells them out for these three.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from continuized.gossip.model.parameters import all_finite
from continuized.gossip.wire.checks import MAX_DIM, MAX_INT, MAX_RAW_DIM, RAW_DTYPES, Vector

__all__ = ["FIELDS", "body_builders"]


def _vector(value: Any) -> Vector | None:
    """A non-empty list of at most MAX_DIM finite floats as a tuple, or a raw part's float64
    or float32 array of at most MAX_RAW_DIM finite ones; None to look closer."""
    if type(value) is np.ndarray:
        if value.dtype not in RAW_DTYPES or value.ndim != 1 or not 0 < value.size <= MAX_RAW_DIM:
            return None
        return value if all_finite(value) else None
    if type(value) is not list:
        return None
    if len(value) == 1:  # gossip's scalar: no loop
        x = value[0]
        return (x,) if type(x) is float and x - x == 0.0 else None
    if not 0 < len(value) <= MAX_DIM or not all(type(x) is float for x in value):
        return None
    total = sum(value)  # inf or nan if any is; an overflow of finite ones only looks closer
    return tuple(value) if total - total == 0.0 else None


def _head(body: dict[str, Any], size: int) -> tuple[int, int, int, float] | None:
    """``src``, ``edge``, ``seq`` and ``t`` of a map of ``size`` fields, or None."""
    try:
        src, edge, seq, t = body["src"], body["edge"], body["seq"], body["t"]
    except KeyError:
        return None
    if len(body) != size or not type(src) is type(edge) is type(seq) is int:
        return None
    if min(src, edge, seq) < 0 or max(src, edge, seq) > MAX_INT:
        return None
    if type(t) is not float or t - t != 0.0:
        return None
    return src, edge, seq, t


def _request(body: dict[str, Any]) -> tuple[Any, ...] | None:
    head = _head(body, 8)
    if head is None:
        return None
    try:
        ack, u, z, served = body["ack"], _vector(body["u"]), body["z"], body["served"]
    except KeyError:
        return None
    if not type(ack) is type(served) is int or u is None:
        return None
    if min(ack, served) < 0 or max(ack, served) > MAX_INT:
        return None
    if z is not None:
        z = _vector(z)
        if z is None:
            return None
    src, edge, seq, t = head
    return src, edge, seq, ack, t, u, z, served


def _reply(body: dict[str, Any]) -> tuple[Any, ...] | None:
    head = _head(body, 7)
    if head is None:
        return None
    try:
        dx, dz, wall = _vector(body["dx"]), _vector(body["dz"]), body["wall"]
    except KeyError:
        return None
    if dx is None or dz is None or len(dx) != len(dz):
        return None
    if type(wall) is not float or wall - wall != 0.0:
        return None
    return (*head, dx, dz, wall)


def _busy(body: dict[str, Any]) -> tuple[Any, ...] | None:
    return _head(body, 4)


FIELDS: dict[str, Callable[[dict[str, Any]], tuple[Any, ...] | None]] = {
    "request": _request,
    "reply": _reply,
    "busy": _busy,
}
"""Message type -> its fast check (see the module header); ``v`` and ``type`` already popped."""


def body_builders(version: int) -> dict[str, Callable[[Any], dict[str, Any]]]:
    """Return message type -> the frame's map of a message of that type, under ``version``."""
    return {
        "request": lambda m: {
            "v": version,
            "type": "request",
            "src": m.src,
            "edge": m.edge,
            "seq": m.seq,
            "ack": m.ack,
            "t": m.t,
            "u": m.u,
            "z": m.z,
            "served": m.served,
        },
        "reply": lambda m: {
            "v": version,
            "type": "reply",
            "src": m.src,
            "edge": m.edge,
            "seq": m.seq,
            "t": m.t,
            "dx": m.dx,
            "dz": m.dz,
            "wall": m.wall,
        },
        "busy": lambda m: {
            "v": version,
            "type": "busy",
            "src": m.src,
            "edge": m.edge,
            "seq": m.seq,
            "t": m.t,
        },
    }
