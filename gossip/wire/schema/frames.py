"""What every frame is: its version, its size limit, its raw parts, and the messages it may hold."""

from __future__ import annotations

from typing import Any, TypeAlias, get_args

import numpy as np

from continuized.gossip.wire.schema.between_nodes import (
    Busy,
    Done,
    LedgerReply,
    LedgerRequest,
    Moved,
    Nack,
    Reply,
    Request,
)
from continuized.gossip.wire.schema.with_coordinator import (
    Beat,
    BeatBatch,
    Bootstrap,
    BootstrapBatch,
    Leave,
    Register,
    RegisterBatch,
    RegisterError,
    Stop,
)

__all__ = [
    "MAX_FRAME",
    "MESSAGE_CLASSES",
    "MESSAGE_TYPES",
    "OPTIONAL_FIELDS",
    "RAW32_EXT",
    "RAW_CODE",
    "RAW_DTYPE",
    "RAW_EXT",
    "RAW_FIELDS",
    "RAW_NAMES",
    "VERSION",
    "Buffer",
    "Frame",
    "Message",
]


VERSION = 6
"""The protocol version in every frame's ``v`` (3: a request may let its jump move later; 4: a
request says which of the server's requests its initiator had answered, ``served``, and a
ledger reply which of its sender's are settled; 5: a crossing request that cannot move is
served, and the server's own request withdrawn, :mod:`gossip.exchange.crossing`; 6: a reply
carries the server's wall clock, ``wall``, and a request's or reply's array values may go as
raw parts of a multipart frame)."""


MAX_FRAME = 1 << 20
"""Largest frame accepted, in bytes (a Bootstrap of a node with thousands of neighbours fits);
of a multipart frame, its map (each raw part has its own limit, ``8 MAX_RAW_DIM`` bytes)."""


RAW_EXT = 1
"""The msgpack extension code of a raw float64 part's index in a multipart frame's map."""


RAW32_EXT = 2
"""The msgpack extension code of a raw float32 part's index (a float32 model's frames)."""


# A raw part's extension code -> its dtype (little-endian, whatever the host's order).
RAW_DTYPE: dict[int, np.dtype[Any]] = {RAW_EXT: np.dtype("<f8"), RAW32_EXT: np.dtype("<f4")}


RAW_CODE: dict[np.dtype[Any], int] = {np.dtype("<f8"): RAW_EXT, np.dtype("<f4"): RAW32_EXT}


Buffer: TypeAlias = "bytes | memoryview"


Frame: TypeAlias = "bytes | tuple[Buffer, ...]"
"""A frame: msgpack bytes, or a map followed by raw float64 or float32 parts (:func:`encode`)."""


# Fields added to a message after its protocol version, with their defaults: left out of a frame
# where they have their default, and that default where a frame leaves them out (older peers').
OPTIONAL_FIELDS: dict[str, dict[str, Any]] = {
    "bootstrap": {"init": ""},
    "beat": {"final_over_mqtt": False},
    "register": {"ready": True},
}


# The fields that may go as raw parts, by message type.
RAW_FIELDS: dict[str, tuple[str, ...]] = {"request": ("u", "z"), "reply": ("dx", "dz")}


RAW_NAMES = ("u", "z")  # at most two raw parts in one frame


Message: TypeAlias = (
    Request
    | Reply
    | Busy
    | Nack
    | LedgerRequest
    | LedgerReply
    | Moved
    | Done
    | Register
    | Leave
    | Bootstrap
    | RegisterError
    | Beat
    | Stop
    | RegisterBatch
    | BootstrapBatch
    | BeatBatch
)


MESSAGE_CLASSES: tuple[type[Any], ...] = get_args(Message)


MESSAGE_TYPES: tuple[str, ...] = tuple(cls.TYPE for cls in MESSAGE_CLASSES)
"""The valid values of the ``type`` field."""
