"""Wire messages: the one module that builds and parses frames.

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeAlias, get_args

import msgpack
import numpy as np

from gossip.errors import ConfigError, LocalError, ProtocolError
from gossip.model.algorithms import check_algorithm
from gossip.wire.checks import (
    MAX_DIM,
    MAX_INT,
    MAX_RAW_DIM,
    Checker,
    Floats,
    Vector,
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
from gossip.wire.hot import FIELDS as _HOT_FIELDS
from gossip.wire.hot import body_builders

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
_RAW_DTYPE: dict[int, np.dtype[Any]] = {RAW_EXT: np.dtype("<f8"), RAW32_EXT: np.dtype("<f4")}
_RAW_CODE: dict[np.dtype[Any], int] = {np.dtype("<f8"): RAW_EXT, np.dtype("<f4"): RAW32_EXT}

Buffer: TypeAlias = "bytes | memoryview"
Frame: TypeAlias = "bytes | tuple[Buffer, ...]"
"""A frame: msgpack bytes, or a map followed by raw float64 or float32 parts (:func:`encode`)."""

# What a training bootstrap may name (gossip.train.recipe.LIVE_ALGORITHMS; the wire does not
# import the trainer).
_TRAINING = ("a2cid2", "adpsgd", "local")

# What a training bootstrap's ``init`` may be when the node draws its own model
# (gossip.train.recipe.INITS).
_INITS = ("common", "per-node")

# Fields added to a message after its protocol version, with their defaults: left out of a frame
# where they have their default, and that default where a frame leaves them out (older peers').
_OPTIONAL: dict[str, dict[str, Any]] = {
    "bootstrap": {"init": ""},
    "beat": {"final_over_mqtt": False},
}

# The fields that may go as raw parts, by message type.
_RAW_FIELDS: dict[str, tuple[str, ...]] = {"request": ("u", "z"), "reply": ("dx", "dz")}
_RAW_NAMES = ("u", "z")  # at most two raw parts in one frame


@dataclass(frozen=True, slots=True)
class Request:
    """Initiator -> server: please run exchange ``(edge, seq)`` at time ``t``; my exchanged
    value at ``t`` is ``u``.

    ``ack`` is the initiator's watermark on this edge: every exchange with a sequence number
    ``<= ack`` is resolved on its side, so the server may forget their cached answers.
    ``z``, if given, is the initiator's second variable at ``t`` (``u`` is then its ``x``): the
    server may *move* the jump to its own later time, mixing ``(u, z)`` there in closed form.
    ``served`` is the highest ``seq`` of the *server's* requests on this edge the initiator had
    answered when it read ``u`` and ``z``: the server's exchanges that ``u`` already includes
    (:mod:`gossip.exchange.exchanger`, crossing requests).
    """

    TYPE: ClassVar[str] = "request"
    src: int
    edge: int
    seq: int
    ack: int
    t: float
    u: Vector
    z: Vector | None = None
    served: int = 0


@dataclass(frozen=True, slots=True)
class Reply:
    """Server -> initiator: exchange ``(edge, seq)`` happened at its time ``t`` (the request's,
    or a later one if the request let the server move it).

    ``(dx, dz)`` flows into the initiator; the server has applied ``(-dx, -dz)`` at ``t``.
    ``wall`` is the server's wall clock (Unix seconds) when it answered: with the request's
    send and the reply's arrival times, the initiator bounds the two clocks' offset
    (:mod:`gossip.exchange.clockskew`); ``0.0``: not said.
    """

    TYPE: ClassVar[str] = "reply"
    src: int
    edge: int
    seq: int
    t: float
    dx: Vector
    dz: Vector
    wall: float = 0.0


@dataclass(frozen=True, slots=True)
class Busy:
    """Server -> initiator: exchange ``(edge, seq)`` was refused, not applied and never will be.

    The server was in an exchange of its own, or had already jumped at time ``t`` later than
    the request's. The initiator tries the activation again later, at a time ``>= t``.
    """

    TYPE: ClassVar[str] = "busy"
    src: int
    edge: int
    seq: int
    t: float


@dataclass(frozen=True, slots=True)
class Nack:
    """Server -> initiator: exchange ``(edge, seq)`` was not applied and never will be."""

    TYPE: ClassVar[str] = "nack"
    src: int
    edge: int
    seq: int
    reason: str


@dataclass(frozen=True, slots=True)
class LedgerRequest:
    """Node -> neighbour: send me your cumulative flow on ``edge``."""

    TYPE: ClassVar[str] = "ledger_request"
    src: int
    edge: int


@dataclass(frozen=True, slots=True)
class LedgerReply:
    """Neighbour -> node: my cumulative flow ``(fx, fz)`` on ``edge``, mixed to my time ``t``.

    ``seq`` is the highest exchange sequence number the neighbour has seen from the requester on
    that edge, so that a restarted requester numbers its next exchanges above it. Every
    exchange the neighbour started on the edge numbered ``<= settled`` is settled: the flow
    holds its jump if it had one (a request's ``served`` counts from there).
    """

    TYPE: ClassVar[str] = "ledger_reply"
    src: int
    edge: int
    seq: int
    t: float
    fx: Floats
    fz: Floats
    settled: int = 0


@dataclass(frozen=True, slots=True)
class Moved:
    """Node -> neighbour: reach me at ``address`` (``tcp://host:port``) on ``edge`` from now on.

    Sent by a restarted node, which may have come back on another address, before each of its
    LedgerRequests. It changes only where the neighbour sends its requests, never the state.
    """

    TYPE: ClassVar[str] = "moved"
    src: int
    edge: int
    address: str


@dataclass(frozen=True, slots=True)
class Done:
    """Node -> neighbour: no exchange of mine on ``edge`` is pending; ``heard`` is 1 once I
    have had the neighbour's own Done on it, else 0 (:mod:`gossip.exchange.parting`)."""

    TYPE: ClassVar[str] = "done"
    src: int
    edge: int
    heard: int


@dataclass(frozen=True, slots=True)
class Register:
    """Node -> coordinator: I am ``name``, reachable at ``address``; optionally my own value."""

    TYPE: ClassVar[str] = "register"
    name: str
    address: str
    value: Floats | None
    pid: int


@dataclass(frozen=True, slots=True)
class Leave:
    """Node -> coordinator: take node ``name`` out of the cluster for good (``gossip node
    --leave``); the coordinator echoes it back once the view without the node is published.

    In a secured cluster it comes over CURVE and is taken only from ``name``'s own key.
    """

    TYPE: ClassVar[str] = "leave"
    name: str


@dataclass(frozen=True, slots=True)
class Beat:
    """Node -> coordinator, every second after the bootstrap: ``name`` still gossips in the run of
    ``epoch``; ``final`` is its final report (JSON) once it stopped, else ``""``. The coordinator
    echoes it (``final`` ``"taken"`` once it holds the report), or answers a :class:`Stop`.

    ``final_over_mqtt``: the node stopped, and its final report, too large for a beat, went
    over MQTT only; ``final`` is then ``""``. Such a beat postdates the stop, so the
    coordinator may answer it ``"taken"`` once it holds the report from MQTT
    (:mod:`coordinator.run.enrollment`). A field added within version 6 (:data:`_OPTIONAL`): left
    out while false, so that a beat, alone or in a :class:`BeatBatch`, is the frame an older
    peer sends and reads, and false where an older node's beat leaves it out. An older
    coordinator refuses a beat that sets it (:mod:`node.lifeline` then beats without it).
    """

    TYPE: ClassVar[str] = "beat"
    TAKEN: ClassVar[str] = "taken"
    name: str
    epoch: float
    final: str
    final_over_mqtt: bool = False


@dataclass(frozen=True, slots=True)
class Stop:
    """Coordinator -> node, the answer to a :class:`Beat` once the run of ``epoch`` is over."""

    TYPE: ClassVar[str] = "stop"
    epoch: float
    reason: str


@dataclass(frozen=True, slots=True)
class Neighbor:
    """One neighbour in a :class:`Bootstrap`: its id, address, the shared edge and its P_e.

    ``step`` is the edge's step ``s_e`` in the jump (``1/2`` for gossip; ``gamma R_eff(e)`` for
    dual accelerated coordinate descent, the paper's Section 7). ``key`` is the neighbour's CURVE
    public key (Z85), or ``""`` in an insecure cluster.
    """

    peer_id: int
    address: str
    edge_index: int
    prob: float
    step: float = 0.5
    key: str = ""


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """Coordinator -> node: everything a node needs to gossip (contract C2).

    ``epoch`` is a Unix time in seconds and ``rate`` the network-wide activations per second:
    the node's time is ``t = rate * (now - epoch)``. ``broker`` is ``mqtt://host:port`` or ``""``.

    Optimization runs (``problem`` not empty) also carry the problem spec, the data spec and the
    split (never data: each node loads its own shard), and ``n``, the node count the split cuts
    the data into; ``eta``, ``c`` and the neighbours' steps are then the dual parameters.

    Training runs (``train`` not empty: the model spec, :mod:`gossip.train.recipe`) carry the
    data, split and ``n`` too, the communications per node per unit of t ``rate_com``, the
    local optimizer (``lr``, ``momentum``, ``batch_size``) and the ``seed`` of the node's
    streams; ``eta``, ``c`` are the exchange's constants. ``t`` then counts gradient steps per
    node, and ``rate`` is steps per second. Their ``initial_value`` is empty and ``init``
    (``common`` or ``per-node``) says how the node draws its own initial model of ``dim``
    parameters (:func:`gossip.train.trainer.node_initial`, up to :data:`MAX_RAW_DIM`), so a
    model of any size fits in the frame. (A training Bootstrap that carries the model in
    ``initial_value``, as earlier coordinators sent it, still decodes.)
    """

    TYPE: ClassVar[str] = "bootstrap"
    node_id: int
    cluster: str
    algorithm: str
    eta: float
    c: float
    theta: float
    epoch: float
    rate: float
    neighbors: tuple[Neighbor, ...]
    initial_value: Floats
    broker: str
    metrics_period: float
    dim: int
    problem: str = ""
    data: str = ""
    split: str = ""
    n: int = 0
    train: str = ""
    rate_com: float = 0.0
    lr: float = 0.0
    momentum: float = 0.0
    batch_size: int = 0
    seed: int = 0
    init: str = ""


@dataclass(frozen=True, slots=True)
class RegisterError:
    """Coordinator -> node: the registration was refused, and why."""

    TYPE: ClassVar[str] = "register_error"
    reason: str


@dataclass(frozen=True, slots=True)
class RegisterBatch:
    """Host process -> coordinator: the registrations of several of its nodes, in one message.

    A host of K nodes sends one of these instead of K :class:`Register`, so the coordinator
    serves one message (and, secure, one CURVE connection) per process rather than per node.
    Secure, the coordinator takes it only from a key whose host process holds every name in it
    (:func:`coordinator.membership.registrar.serve_registrations`).
    """

    TYPE: ClassVar[str] = "register_batch"
    nodes: tuple[Register, ...]


@dataclass(frozen=True, slots=True)
class BootstrapBatch:
    """Coordinator -> host process: the Bootstraps of some of a :class:`RegisterBatch`'s nodes,
    ``bootstraps[i]`` for node ``names[i]``. A batch too large for one frame comes as several."""

    TYPE: ClassVar[str] = "bootstrap_batch"
    names: tuple[str, ...]
    bootstraps: tuple[Bootstrap, ...]


@dataclass(frozen=True, slots=True)
class BeatBatch:
    """Host process <-> coordinator: the :class:`Beat` of several of its nodes in one message
    (:mod:`node.lifeline`), and the coordinator's echoes of them (a :class:`Stop` or a
    refusal goes on its own)."""

    TYPE: ClassVar[str] = "beat_batch"
    beats: tuple[Beat, ...]


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

_CLASSES: tuple[type[Any], ...] = get_args(Message)
MESSAGE_TYPES: tuple[str, ...] = tuple(cls.TYPE for cls in _CLASSES)
"""The valid values of the ``type`` field."""


# --- encoding ------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, Neighbor):
        return [value.peer_id, value.address, value.edge_index, value.prob, value.step, value.key]
    if isinstance(value, Register):
        return [value.name, value.address, _plain(value.value), value.pid]
    if isinstance(value, Beat):  # a batch's: the flag only when set, as an older peer reads it
        if value.final_over_mqtt:
            return [value.name, value.epoch, value.final, True]
        return [value.name, value.epoch, value.final]
    if isinstance(value, Bootstrap):  # a batch's: its fields as a map, as a frame has them
        body = {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
        return _without_defaults(value.TYPE, body)
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
        for name in _RAW_FIELDS.get(message.TYPE, ()):
            value = body[name]
            if type(value) is np.ndarray:
                if parts is None:
                    parts = [b""]
                code = _RAW_CODE.get(value.dtype, RAW_EXT)
                body[name] = msgpack.ExtType(code, bytes([len(parts)]))
                raw = np.ascontiguousarray(value, dtype=_RAW_DTYPE[code])
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
    return _PACKER.pack(_without_defaults(message.TYPE, body))  # type: ignore[no-any-return]


def _without_defaults(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` less its optional fields (:data:`_OPTIONAL`) that have their default."""
    for name, default in _OPTIONAL.get(kind, {}).items():
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


# --- decoding and validation ---------------------------------------------------------------


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
        if not isinstance(item, list) or len(item) != 4:
            raise ProtocolError(
                f"field {where!r} must be [name, address, value, pid], got {item!r}"
            )
        out.append(
            Register(
                string(f"{where}.name", item[0]),
                string(f"{where}.address", item[1]),
                optional_floats(f"{where}.value", item[2]),
                integer(f"{where}.pid", item[3]),
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
            boot = _checked(Bootstrap.TYPE, dict(item))
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
    ("bootstrap", "initial_value"): _model_start,  # _check_bootstrap_model says when empty
}


def _schema(cls: type[Any]) -> tuple[type[Any], Mapping[str, Checker]]:
    checkers = {
        f.name: _STRICTER.get((cls.TYPE, f.name)) or _BY_TYPE[str(f.type)] for f in fields(cls)
    }
    return cls, checkers


_SCHEMAS: dict[str, tuple[type[Any], Mapping[str, Checker]]] = {
    cls.TYPE: _schema(cls) for cls in _CLASSES
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
    return schema[0](*fast) if fast is not None else _checked(kind, body)


def _no_raw(code: int, data: bytes) -> Any:
    raise ProtocolError(f"frame holds msgpack extension {code} but has no raw parts")


def _raw_parts(frame: tuple[Buffer, ...]) -> tuple[Buffer, Callable[[int, bytes], Any]]:
    """The map of a multipart frame, and the msgpack ext hook that reads its raw parts."""
    if len(frame) < 2 or len(frame) > 1 + len(_RAW_NAMES):
        raise ProtocolError(
            f"a multipart frame has a map and 1 to {len(_RAW_NAMES)} raw parts, got "
            f"{len(frame)} parts"
        )
    raw = frame[1:]

    def hook(code: int, data: bytes) -> Any:
        dtype = _RAW_DTYPE.get(code)
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


def _checked(kind: str, body: dict[str, Any]) -> Message:
    """The message of type ``kind`` whose fields (``v`` and ``type`` popped) are ``body``,
    checked by the schema (:data:`_SCHEMAS`)."""
    cls, checkers = _SCHEMAS[kind]
    for name, default in _OPTIONAL.get(kind, {}).items():
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
        _check_bootstrap_model(values)
    if kind == BootstrapBatch.TYPE and len(values["names"]) != len(values["bootstraps"]):
        raise ProtocolError(
            f"field 'bootstraps' has {len(values['bootstraps'])} entries but 'names' has "
            f"{len(values['names'])}; they must match"
        )
    if kind == Bootstrap.TYPE:
        _check_bootstrap_algorithm(values["algorithm"], values["problem"], values["train"])
    message: Message = cls(**values)
    return message


def _check_bootstrap_model(values: Mapping[str, Any]) -> None:
    """A bootstrap carries the node's initial value (``dim`` components), or trains a model of
    ``dim`` parameters that the node draws itself as ``init`` says."""
    start, dim, train, init = (
        values["initial_value"],
        values["dim"],
        values["train"],
        values["init"],
    )
    if init and not train:
        raise ProtocolError(
            f"field 'init' is {init!r} but 'train' is empty; only a training bootstrap names "
            "how its node draws its model"
        )
    if start:
        if len(start) != dim:
            raise ProtocolError(
                f"field 'initial_value' has {len(start)} components but 'dim' is {dim}"
            )
        return
    if not train:
        raise ProtocolError(
            f"field 'initial_value' is empty, but 'train' is empty too: a bootstrap that trains "
            f"no model carries its node's initial value, 'dim' = {dim} components"
        )
    if not 1 <= dim <= MAX_RAW_DIM:
        raise ProtocolError(
            f"field 'dim' must be 1 to {MAX_RAW_DIM} parameters (a model's exchange bound), "
            f"got {dim}"
        )
    if init not in _INITS:
        raise ProtocolError(
            f"field 'init' must be one of {', '.join(_INITS)} when 'initial_value' is empty "
            f"(the node draws its own model), got {init!r}"
        )


def _check_bootstrap_algorithm(algorithm: str, problem: str, train: str = "") -> None:
    """A node runs only what the one rule allows
    (:func:`gossip.model.algorithms.check_algorithm`), or trains with a live algorithm."""
    if not algorithm:  # an empty name would mean "the default": a bootstrap names its algorithm
        raise ProtocolError("field 'algorithm' is empty; a bootstrap names its algorithm")
    if train:
        if problem or algorithm not in _TRAINING:
            raise ProtocolError(
                f"field 'algorithm' {algorithm!r} cannot train (with problem {problem!r}); "
                f"valid: {', '.join(_TRAINING)} and no problem"
            )
        return
    try:
        check_algorithm(algorithm, problem=bool(problem), live=True)
    except ConfigError as exc:
        raise ProtocolError(
            f"field 'algorithm' {algorithm!r} does not go with problem {problem!r}: {exc}"
        ) from None
