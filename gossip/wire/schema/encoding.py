"""Messages to frames (:func:`encode`): a msgpack map, and raw parts for a model's arrays."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import msgpack
import numpy as np

from continuized.gossip.errors import LocalError
from continuized.gossip.wire.hot import body_builders
from continuized.gossip.wire.schema.frames import (
    OPTIONAL_FIELDS,
    RAW_CODE,
    RAW_DTYPE,
    RAW_EXT,
    RAW_FIELDS,
    VERSION,
    Buffer,
    Frame,
    Message,
)
from continuized.gossip.wire.schema.with_coordinator import Beat, Bootstrap, Neighbor, Register

__all__ = ["encode", "encode_bytes", "frame_size", "without_defaults"]


def _plain(value: Any) -> Any:
    if isinstance(value, Neighbor):
        return [value.peer_id, value.address, value.edge_index, value.prob, value.step, value.key]
    if isinstance(value, Register):  # a batch's: the flag only when not ready, as for a beat
        plain = [value.name, value.address, _plain(value.value), value.pid]
        return plain if value.ready else [*plain, False]
    if isinstance(value, Beat):  # a batch's: the flag only when set, as an older peer reads it
        if value.final_over_mqtt:
            return [value.name, value.epoch, value.final, True]
        return [value.name, value.epoch, value.final]
    if isinstance(value, Bootstrap):  # a batch's: its fields as a map, as a frame has them
        body = {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
        return without_defaults(value.TYPE, body)
    return [_plain(item) for item in value] if type(value) is tuple else value


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


_PACKER = msgpack.Packer(use_bin_type=True)  # msgpack.packb would build one per call


_HOT_BODIES = body_builders(VERSION)  # the exchange's own messages: gossip.wire.hot


def encode(message: Message) -> Frame:
    """Return the frame of ``message``: its msgpack map (fields plus ``v`` and ``type``).

    A request's or reply's vector given as a float64 array goes as a raw part beside the map
    (the map holds the part's index, msgpack extension :data:`RAW_EXT`; a float32 array goes
    as float32, extension :data:`RAW32_EXT`; any other array as float64), and the frame is
    then a tuple ``(map, part, ...)`` whose parts are views of the arrays, never copies:
    a model's parameters would cost far more to pack as msgpack floats than to send.
    Encoding does not validate: the receiver does (see :func:`decode`).
    """
    hot = _HOT_BODIES.get(message.TYPE)
    if hot is not None:
        body = hot(message)
        parts: list[Buffer] | None = None
        for name in RAW_FIELDS.get(message.TYPE, ()):
            value = body[name]
            if type(value) is np.ndarray:
                if parts is None:
                    parts = [b""]
                code = RAW_CODE.get(value.dtype, RAW_EXT)
                body[name] = msgpack.ExtType(code, bytes([len(parts)]))
                raw = np.ascontiguousarray(value, dtype=RAW_DTYPE[code])
                parts.append(raw.data.cast("B"))
        if parts is None:
            return _PACKER.pack(body)  # type: ignore[no-any-return]
        parts[0] = _PACKER.pack(body)
        return tuple(parts)
    names = _FIELD_NAMES.get(type(message))
    if names is None:  # dataclasses.fields() is slow: look each class up once
        names = _FIELD_NAMES[type(message)] = tuple(f.name for f in fields(message))
    body = {"v": VERSION, "type": message.TYPE}
    for name in names:
        value = getattr(message, name)
        body[name] = _plain(value) if type(value) is tuple else value
    return _PACKER.pack(without_defaults(message.TYPE, body))  # type: ignore[no-any-return]


def without_defaults(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` less its optional fields (:data:`OPTIONAL_FIELDS`) that have their default."""
    for name, default in OPTIONAL_FIELDS.get(kind, {}).items():
        if body.get(name) == default:
            del body[name]
    return body


def encode_bytes(message: Message) -> bytes:
    """Return :func:`encode` of a message that has no raw parts (all but a request's or a
    reply's with array values), as the bytes of one frame.

    Raises
    ------
    LocalError
        ``message`` encodes to a multipart frame.
    """
    frame = encode(message)
    if type(frame) is not bytes:
        raise LocalError(f"a {message.TYPE} with array values is a multipart frame, not bytes")
    return frame


def frame_size(frame: Frame) -> int:
    """Return the bytes of ``frame``, all its parts together."""
    if isinstance(frame, bytes):
        return len(frame)
    return sum(memoryview(part).nbytes for part in frame)
