"""Frames to messages (:func:`decode`), every field checked on the way."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

import msgpack
import numpy as np

from continuized.gossip.errors import ProtocolError
from continuized.gossip.wire.checks import (
    MAX_RAW_DIM,
    Checker,
    Floats,
    flag,
    floats,
    integer,
    number,
    optional_floats,
    optional_vector,
    positive,
    string,
    vector,
)
from continuized.gossip.wire.hot import FIELDS as _HOT_FIELDS
from continuized.gossip.wire.schema.between_nodes import (
    LedgerReply,
    Reply,
)
from continuized.gossip.wire.schema.frames import (
    MAX_FRAME,
    MESSAGE_CLASSES,
    MESSAGE_TYPES,
    OPTIONAL_FIELDS,
    RAW32_EXT,
    RAW_DTYPE,
    RAW_EXT,
    RAW_NAMES,
    VERSION,
    Buffer,
    Frame,
    Message,
)
from continuized.gossip.wire.schema.with_coordinator import (
    Beat,
    Bootstrap,
    BootstrapBatch,
    Neighbor,
    Register,
    check_bootstrap_algorithm,
    check_bootstrap_model,
)

__all__ = ["checked_message", "decode"]


def _neighbors(name: str, value: Any) -> tuple[Neighbor, ...]:
    if not isinstance(value, list):
        raise ProtocolError(f"field {name!r} must be a list, got {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(item, list) or len(item) not in (5, 6):
            raise ProtocolError(
                f"field {where!r} must be [peer_id, address, edge_index, prob, step, key], "
                f"got {item!r}"
            )
        prob = number(f"{where}.prob", item[3])
        if not 0.0 < prob <= 1.0:
            raise ProtocolError(f"field {where + '.prob'!r} must be in (0, 1], got {prob!r}")
        out.append(
            Neighbor(
                integer(f"{where}.peer_id", item[0]),
                string(f"{where}.address", item[1]),
                integer(f"{where}.edge_index", item[2]),
                prob,
                positive(f"{where}.step", item[4]),
                string(f"{where}.key", item[5]) if len(item) == 6 else "",
            )
        )
    return tuple(out)


def _strings(name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ProtocolError(f"field {name!r} must be a list, got {type(value).__name__}")
    return tuple(string(f"{name}[{i}]", item) for i, item in enumerate(value))


def _registers(name: str, value: Any) -> tuple[Register, ...]:
    if not isinstance(value, list) or not value:
        raise ProtocolError(f"field {name!r} must be a non-empty list, got {value!r:.80}")
    out = []
    for i, item in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(item, list) or len(item) not in (4, 5):
            raise ProtocolError(
                f"field {where!r} must be [name, address, value, pid] or [name, address, "
                f"value, pid, ready], got {item!r}"
            )
        out.append(
            Register(
                string(f"{where}.name", item[0]),
                string(f"{where}.address", item[1]),
                optional_floats(f"{where}.value", item[2]),
                integer(f"{where}.pid", item[3]),
                flag(f"{where}.ready", item[4]) if len(item) == 5 else True,
            )
        )
    return tuple(out)


def _beats(name: str, value: Any) -> tuple[Beat, ...]:
    if not isinstance(value, list):
        raise ProtocolError(f"field {name!r} must be a list, got {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(item, list) or len(item) not in (3, 4):
            raise ProtocolError(
                f"field {where!r} must be [name, epoch, final] or [name, epoch, final, "
                f"final_over_mqtt], got {item!r:.200}"
            )
        out.append(
            Beat(
                string(f"{where}.name", item[0]),
                number(f"{where}.epoch", item[1]),
                string(f"{where}.final", item[2]),
                flag(f"{where}.final_over_mqtt", item[3]) if len(item) == 4 else False,
            )
        )
    return tuple(out)


def _model_start(name: str, value: Any) -> Floats:
    """What :func:`floats` accepts, or an empty list (a training node draws its own model)."""
    if isinstance(value, list) and not value:
        return ()
    return floats(name, value)


def _bootstraps(name: str, value: Any) -> tuple[Bootstrap, ...]:
    if not isinstance(value, list):
        raise ProtocolError(f"field {name!r} must be a list, got {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise ProtocolError(f"field '{name}[{i}]' must be a map, got {type(item).__name__}")
        try:  # every check of a lone Bootstrap's frame
            boot = checked_message(Bootstrap.TYPE, dict(item))
        except ProtocolError as exc:
            raise ProtocolError(f"field '{name}[{i}]': {exc}") from None
        assert isinstance(boot, Bootstrap)
        out.append(boot)
    return tuple(out)


# The schema of every message: each field's checker follows from its type in the class, but
# where a field must be more than its type says (:data:`_STRICTER`).
_BY_TYPE: dict[str, Checker] = {
    "int": integer,
    "float": number,
    "str": string,
    "bool": flag,
    "Floats": floats,
    "Floats | None": optional_floats,
    "Vector": vector,
    "Vector | None": optional_vector,
    "tuple[Neighbor, ...]": _neighbors,
    "tuple[str, ...]": _strings,
    "tuple[Register, ...]": _registers,
    "tuple[Bootstrap, ...]": _bootstraps,
    "tuple[Beat, ...]": _beats,
}


_STRICTER: dict[tuple[str, str], Checker] = {
    ("bootstrap", "rate"): positive,
    ("bootstrap", "metrics_period"): positive,
    ("bootstrap", "initial_value"): _model_start,  # check_bootstrap_model says when empty
}


def _schema(cls: type[Any]) -> tuple[type[Any], Mapping[str, Checker]]:
    checkers = {
        f.name: _STRICTER.get((cls.TYPE, f.name)) or _BY_TYPE[str(f.type)] for f in fields(cls)
    }
    return cls, checkers


_SCHEMAS: dict[str, tuple[type[Any], Mapping[str, Checker]]] = {
    cls.TYPE: _schema(cls) for cls in MESSAGE_CLASSES
}
"""Message type -> its class and its fields' checkers, in the class's order."""


# Vectors that must have the same length within one message.
_SAME_LENGTH: dict[str, tuple[str, str]] = {
    Reply.TYPE: ("dx", "dz"),
    LedgerReply.TYPE: ("fx", "fz"),
}


def decode(frame: Frame) -> Message:
    """Parse and validate one frame (bytes, or a map and its raw parts), and return its message.

    Raises
    ------
    ProtocolError
        The frame is not msgpack, not a map, too large, of another version, of an unknown type,
        or one of its fields is missing, unexpected, of the wrong type or not finite. The message
        names the field and what would have been valid.
    """
    header: Buffer
    if isinstance(frame, tuple):
        header, hook = _raw_parts(frame)
    else:
        header, hook = frame, _no_raw
    if len(header) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(header)} bytes exceeds the limit of {MAX_FRAME}")
    try:
        body = msgpack.unpackb(header, raw=False, strict_map_key=True, use_list=True, ext_hook=hook)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises many unrelated types on garbage
        raise ProtocolError(f"frame is not valid msgpack ({type(exc).__name__}: {exc})") from None
    if not isinstance(body, dict):
        raise ProtocolError(f"frame must be a msgpack map, got {type(body).__name__}")
    version = body.pop("v", None)
    if version != VERSION or type(version) is not int:
        raise ProtocolError(f"field 'v' must be {VERSION} (protocol version), got {version!r}")
    kind = body.pop("type", None)
    schema = _SCHEMAS.get(kind) if isinstance(kind, str) else None
    if schema is None:
        raise ProtocolError(f"field 'type' must be one of {', '.join(MESSAGE_TYPES)}, got {kind!r}")
    hot = _HOT_FIELDS.get(kind)
    fast = None if hot is None else hot(body)
    return schema[0](*fast) if fast is not None else checked_message(kind, body)


def _no_raw(code: int, data: bytes) -> Any:
    raise ProtocolError(f"frame holds msgpack extension {code} but has no raw parts")


def _raw_parts(frame: tuple[Buffer, ...]) -> tuple[Buffer, Callable[[int, bytes], Any]]:
    """The map of a multipart frame, and the msgpack ext hook that reads its raw parts."""
    if len(frame) < 2 or len(frame) > 1 + len(RAW_NAMES):
        raise ProtocolError(
            f"a multipart frame has a map and 1 to {len(RAW_NAMES)} raw parts, got "
            f"{len(frame)} parts"
        )
    raw = frame[1:]

    def hook(code: int, data: bytes) -> Any:
        dtype = RAW_DTYPE.get(code)
        index = data[0] if dtype is not None and len(data) == 1 else 0
        if dtype is None or not 1 <= index <= len(raw):
            raise ProtocolError(
                f"msgpack extension {code} {data!r} names no raw part; valid: extension "
                f"{RAW_EXT} (float64) or {RAW32_EXT} (float32) with one byte 1 to {len(raw)}"
            )
        part = memoryview(raw[index - 1])
        size = dtype.itemsize
        if part.nbytes % size or part.nbytes > size * MAX_RAW_DIM:
            raise ProtocolError(
                f"raw part {index} has {part.nbytes} bytes; valid: a multiple of {size} "
                f"({dtype.name}), at most {size * MAX_RAW_DIM}"
            )
        array = np.frombuffer(part, dtype=dtype)
        # Read-only, as the frozen message that holds it: a ledger may then book it lazily
        # (gossip.model.parameters), and nothing can change it in between.
        array.flags.writeable = False
        return array

    return frame[0], hook


def checked_message(kind: str, body: dict[str, Any]) -> Message:
    """The message of type ``kind`` whose fields (``v`` and ``type`` popped) are ``body``,
    checked by the schema (:data:`_SCHEMAS`)."""
    cls, checkers = _SCHEMAS[kind]
    for name, default in OPTIONAL_FIELDS.get(kind, {}).items():
        body.setdefault(name, default)
    if body.keys() != checkers.keys():
        missing = [name for name in checkers if name not in body]
        if missing:
            raise ProtocolError(
                f"{kind} message is missing field(s) {', '.join(map(repr, missing))}"
            )
        extra = sorted(str(name) for name in body if name not in checkers)
        raise ProtocolError(
            f"{kind} message has unexpected field(s) {', '.join(map(repr, extra))}; valid: "
            f"{', '.join(checkers)}"
        )
    values = {name: check(name, body[name]) for name, check in checkers.items()}
    pair = _SAME_LENGTH.get(kind)
    if pair is not None and len(values[pair[0]]) != len(values[pair[1]]):
        raise ProtocolError(
            f"field {pair[1]!r} has {len(values[pair[1]])} components but {pair[0]!r} has "
            f"{len(values[pair[0]])}; they must match"
        )
    if kind == Bootstrap.TYPE:
        check_bootstrap_model(values)
    if kind == BootstrapBatch.TYPE and len(values["names"]) != len(values["bootstraps"]):
        raise ProtocolError(
            f"field 'bootstraps' has {len(values['bootstraps'])} entries but 'names' has "
            f"{len(values['names'])}; they must match"
        )
    if kind == Bootstrap.TYPE:
        check_bootstrap_algorithm(values["algorithm"], values["problem"], values["train"])
    message: Message = cls(**values)
    return message
