"""Wire messages: the one package that builds and parses frames.

Every frame is a msgpack map with a protocol version ``v`` (:data:`VERSION`), a ``type`` tag and
the message's fields. Messages are frozen dataclasses; :func:`encode` turns one into bytes and
:func:`decode` turns bytes back into a message after checking every field, so that nothing a peer
sends can reach the node's state unchecked. The exchange's own three messages take a faster
path under the same rules (:mod:`gossip.wire.hot`).

Validation rules (each violation raises :class:`~gossip.errors.ProtocolError` naming the field):

* the frame is a msgpack map of at most :data:`MAX_FRAME` bytes;
* ``v`` equals :data:`VERSION` and ``type`` is one of :data:`MESSAGE_TYPES`;
* every field of the type is present and no other field is;
* integers are ints (not bools), ``>= 0`` and ``<=`` :data:`MAX_INT`; floats are finite
  numbers (ints are accepted and converted); vectors are non-empty lists of finite numbers of
  at most :data:`MAX_DIM` entries (but a training :class:`Bootstrap`'s ``initial_value``, which
  is empty: the node draws its own model); strings are strings; flags are bools;
* a field added to a message since its version (:data:`_OPTIONAL`) may be absent, and then
  has its default; it is left out of a frame where it has its default, so that a frame that
  does not need it is the one an older peer sends and reads.

Gossip exchange (node to node; the protocol is :mod:`gossip.exchange.exchanger`'s, each class says
what it carries): :class:`Request`, answered by a :class:`Reply` (the jump's flow), a :class:`Busy`
(refused: try again later) or a :class:`Nack` (never applied: closed or recovering);
:class:`LedgerRequest` and :class:`LedgerReply` (a restarted node's recovery), :class:`Moved`
(its new address) and :class:`Done` (a stopping node's goodbye, :mod:`gossip.exchange.parting`).

Registration (node to coordinator, contract C2): :class:`Register`, :class:`Bootstrap` (with its
:class:`Neighbor` entries) and :class:`RegisterError`; a host process's nodes at once,
:class:`RegisterBatch` answered by :class:`BootstrapBatch` (:mod:`node.registration`), and
:class:`BeatBatch` (their lifelines' beats, and the echoes); :class:`Leave` (a node leaving for
good); :class:`Beat` and :class:`Stop` (the lifeline that outlives the broker,
:mod:`node.lifeline`).

Examples
--------
>>> msg = Request(src=1, edge=0, seq=7, ack=6, t=2.5, u=(1.0,))
>>> decode(encode(msg)) == msg
True
"""

from __future__ import annotations

from continuized.gossip.wire.checks import MAX_DIM, MAX_INT, MAX_RAW_DIM
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
from continuized.gossip.wire.schema.decoding import decode
from continuized.gossip.wire.schema.encoding import encode, encode_bytes, frame_size
from continuized.gossip.wire.schema.frames import (
    MAX_FRAME,
    MESSAGE_TYPES,
    RAW32_EXT,
    RAW_EXT,
    VERSION,
    Buffer,
    Frame,
    Message,
)
from continuized.gossip.wire.schema.with_coordinator import (
    Beat,
    BeatBatch,
    Bootstrap,
    BootstrapBatch,
    Leave,
    Neighbor,
    Register,
    RegisterBatch,
    RegisterError,
    Stop,
)

__all__ = [
    "MAX_DIM",
    "MAX_FRAME",
    "MAX_INT",
    "MAX_RAW_DIM",
    "MESSAGE_TYPES",
    "RAW32_EXT",
    "RAW_EXT",
    "VERSION",
    "Beat",
    "BeatBatch",
    "Bootstrap",
    "BootstrapBatch",
    "Buffer",
    "Busy",
    "Done",
    "Frame",
    "Leave",
    "LedgerReply",
    "LedgerRequest",
    "Message",
    "Moved",
    "Nack",
    "Neighbor",
    "Register",
    "RegisterBatch",
    "RegisterError",
    "Reply",
    "Request",
    "Stop",
    "decode",
    "encode",
    "encode_bytes",
    "frame_size",
]
